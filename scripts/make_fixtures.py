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

from glmcheck.model import build_dummy_model, make_config
from glmcheck.model.fp8_export import write_fp8


def write_bf16(out: Path) -> None:
    model = build_dummy_model(make_config("tiny"), seed=0, init="sharp")
    model.save_pretrained(out, max_shard_size="1MB")
    # Leave layer_types to each transformers version's default: 5.24 writes "indexed_attention",
    # which 5.17 (the GPU machine's) rejects; 5.17's own default is "deepseek_sparse_attention".
    config = json.loads((out / "config.json").read_text())
    config.pop("layer_types", None)
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


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
