"""Write the tiny checkpoints under fixtures/ (bf16 and block-FP8), from seeded dummy weights.

Usage: python scripts/make_fixtures.py [--out fixtures]
tiny-bf16: `save_pretrained` of the `tiny` preset (seed 0, sharp init), sharded so the index
is exercised. tiny-fp8: the same tensors with every attention / MLP / expert projection stored
as e4m3 with 128x128 block scales (`weight_scale_inv`) and an fp8 `quantization_config`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from glmcheck.model import build_dummy_model, make_config
from glmcheck.model.fp8_blocks import BLOCK, quantize_blocks

NOT_CONVERTED = ["lm_head", "model.embed_tokens", "indexer", "mlp.gate"]


def is_quantised(name: str, tensor: torch.Tensor) -> bool:
    return (tensor.dim() == 2 and name.endswith("_proj.weight") and "indexer" not in name
            and not name.endswith("mlp.gate.weight"))


def write_bf16(out: Path) -> None:
    model = build_dummy_model(make_config("tiny"), seed=0, init="sharp")
    model.save_pretrained(out, max_shard_size="1MB")
    # Leave layer_types to each transformers version's default: 5.24 writes "indexed_attention",
    # which 5.17 (the GPU machine's) rejects; 5.17's own default is "deepseek_sparse_attention".
    config = json.loads((out / "config.json").read_text())
    config.pop("layer_types", None)
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def write_fp8(source: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    index = json.loads((source / "model.safetensors.index.json").read_text())
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
    (out / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": new_map}, indent=1))
    config = json.loads((source / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                     "weight_block_size": [BLOCK, BLOCK], "modules_to_not_convert": NOT_CONVERTED}
    (out / "config.json").write_text(json.dumps(config, indent=1))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="fixtures")
    root = Path(parser.parse_args().out)
    for sub in ("tiny-bf16", "tiny-fp8"):
        shutil.rmtree(root / sub, ignore_errors=True)
    write_bf16(root / "tiny-bf16")
    write_fp8(root / "tiny-bf16", root / "tiny-fp8")
    for sub in ("tiny-bf16", "tiny-fp8"):
        size = sum(f.stat().st_size for f in (root / sub).iterdir())
        print(f"{root / sub}: {size / 2**20:.2f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
