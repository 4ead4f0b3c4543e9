"""Checkpoints that disagree with their config: a copy of a committed tiny fixture with one shard
rewritten (a tensor of another shape, a tensor removed, an extra tensor, a wrong FP8 scale)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
BF16, FP8 = FIXTURES / "tiny-bf16", FIXTURES / "tiny-fp8"
INDEX = "model.safetensors.index.json"

KV_B0 = "model.layers.0.self_attn.kv_b_proj.weight"  # [512, 64] in both fixtures; FP8 scale [4, 1]
KV_B2 = "model.layers.2.self_attn.kv_b_proj.weight"  # a later layer: layer0 loading does not read it
EXPERT2 = "model.layers.2.mlp.experts.3.down_proj.weight"  # [256, 64], stored per expert
EXTRA = "model.layers.0.self_attn.extra_proj.weight"


def _index(root: Path) -> dict:
    return json.loads((root / INDEX).read_text())


def rewrite(source: Path, target: Path, name: str, change: str) -> Path:
    """A copy of `source` at `target` whose tensor `name` is changed:
    - "halve": its first dimension halved (same dtype; an FP8 weight stays FP8, its scale untouched);
    - "drop": removed from its shard and from the index;
    - "drop-file": removed from its shard only (the index still names it);
    - "add": `name` added (a 4 x 4 bf16 tensor) beside the tensors of layer 0's shard;
    - "nan": its first 256 bytes overwritten with 0xFF (NaN in bf16 and fp32), shape and dtype kept;
    - "bf16": its values stored as bf16 (FP8 codes that are no longer e4m3), shape kept.
    """
    shutil.copytree(source, target)
    index = _index(target)
    file = index["weight_map"][KV_B0 if change == "add" else name]
    tensors = load_file(target / file)
    if change == "halve":
        whole = tensors[name]
        tensors[name] = whole.float()[: whole.shape[0] // 2].to(whole.dtype).contiguous()
    elif change in ("drop", "drop-file"):
        del tensors[name]
        if change == "drop":
            del index["weight_map"][name]
    elif change == "nan":
        tensors[name] = tensors[name].clone()
        tensors[name].view(-1).view(torch.uint8)[:256] = 0xFF
    elif change == "bf16":
        tensors[name] = tensors[name].float().to(torch.bfloat16)
    elif change == "add":
        tensors[name] = torch.zeros(4, 4, dtype=torch.bfloat16)
        index["weight_map"][name] = file
    else:
        raise ValueError(f"unknown change {change!r}")
    save_file(tensors, target / file, metadata={"format": "pt"})
    (target / INDEX).write_text(json.dumps(index, indent=1))
    return target


def edit_config(root: Path, **changes) -> Path:
    """Set (value) or remove (None) fields of root/config.json."""
    config = json.loads((root / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    (root / "config.json").write_text(json.dumps(config, indent=1))
    return root


def add_tokenizer(root: Path) -> Path:
    """A small word-level tokenizer (ids < 64), so firsttoken can run on the checkpoint."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, **{chr(ord("a") + i): 1 + i for i in range(26)}}
    inner = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    inner.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=inner, unk_token="<unk>").save_pretrained(root)
    return root


def broken_checkpoints(base: Path) -> dict[str, Path]:
    """The broken checkpoints the CLI matrix runs every loading command on (each with a tokenizer)."""
    made = {
        "shape0": rewrite(BF16, base / "shape0", KV_B0, "halve"),
        "shape2": rewrite(BF16, base / "shape2", KV_B2, "halve"),
        "missing0": rewrite(BF16, base / "missing0", KV_B0, "drop"),
        "missing2": rewrite(BF16, base / "missing2", EXPERT2, "drop-file"),
        "fp8-scale": rewrite(FP8, base / "fp8-scale", KV_B0 + "_scale_inv", "halve"),
        "fp8-weight2": rewrite(FP8, base / "fp8-weight2", KV_B2, "halve"),
        "nan0": rewrite(BF16, base / "nan0", KV_B0, "nan"),  # loads; its reference is NaN (issue 44, item 5)
    }
    for root in made.values():
        add_tokenizer(root)
    return made
