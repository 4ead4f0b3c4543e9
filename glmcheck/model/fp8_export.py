"""Write a bf16 Hugging Face checkpoint folder again in the GLM-5.x block-FP8 format.

Every 2-D attention / MLP / expert projection (`*_proj.weight`, the indexer and the router
excepted) is stored as float8 e4m3 with one fp32 scale per 128 x 128 block
(`<name>_scale_inv`, `glmcheck.model.fp8_blocks.quantize_blocks`); the config gains GLM-5.x's
`quantization_config` (fp8, e4m3, dynamic activations, 128 x 128 blocks). Shards keep their
names; every other file of the folder (tokenizer, generation config, records) is copied.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from glmcheck.model.fp8_blocks import BLOCK, quantize_blocks

NOT_CONVERTED = ["lm_head", "model.embed_tokens", "indexer", "mlp.gate"]
INDEX_FILE = "model.safetensors.index.json"


def is_quantised(name: str, tensor: torch.Tensor) -> bool:
    """True for the tensors GLM-5.x stores in FP8: 2-D `*_proj.weight` outside the indexer and router."""
    return quantised_shape(name, tensor.shape)


def quantised_shape(name: str, shape) -> bool:
    """`is_quantised` from a name and shape alone."""
    return (len(shape) == 2 and name.endswith("_proj.weight") and "indexer" not in name
            and not name.endswith("mlp.gate.weight"))


def held_in_fp8(name: str, shape) -> bool:
    """True for the model parameters whose files GLM-5.x stores in FP8: `quantised_shape`'s, and the fused expert
    stacks `mlp.experts.gate_up_proj` / `down_proj` (stored per expert, each matrix in FP8)."""
    return quantised_shape(name, shape) or name.endswith(("mlp.experts.gate_up_proj", "mlp.experts.down_proj"))


def write_fp8(source: str | Path, out: str | Path) -> None:
    """The checkpoint in `source` (sharded, with an index) as a block-FP8 checkpoint in `out`."""
    source, out = Path(source), Path(out)
    if not (source / INDEX_FILE).is_file():
        raise FileNotFoundError(f"{source / INDEX_FILE} does not exist (write_fp8 needs a sharded checkpoint)")
    out.mkdir(parents=True, exist_ok=True)
    index = json.loads((source / INDEX_FILE).read_text())
    new_map: dict[str, str] = {}
    for file in sorted(set(index["weight_map"].values())):
        tensors = {}
        for name, tensor in load_file(source / file).items():
            if is_quantised(name, tensor):
                tensors[name], tensors[name + "_scale_inv"] = quantize_blocks(tensor)
                new_map[name + "_scale_inv"] = file
            else:
                tensors[name] = tensor
            new_map[name] = file
        save_file(tensors, out / file, metadata={"format": "pt"})
    (out / INDEX_FILE).write_text(json.dumps({"metadata": {}, "weight_map": new_map}, indent=1))
    config = json.loads((source / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                     "weight_block_size": [BLOCK, BLOCK], "modules_to_not_convert": NOT_CONVERTED}
    (out / "config.json").write_text(json.dumps(config, indent=1))
    shards = set(index["weight_map"].values())
    for path in source.iterdir():
        if path.is_file() and path.name not in shards | {INDEX_FILE, "config.json"}:
            shutil.copy2(path, out / path.name)
