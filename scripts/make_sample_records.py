"""Write the sample run records the drift notebook reads by default (package data, glmcheck/data/resources/
sample_records/, found with `glmcheck.records.samples.sample_records_dir`, so a wheel carries them).

Usage: python scripts/make_sample_records.py [--out glmcheck/data/resources/sample_records]
Runs, on the CPU with the default trained model (ref-cpu) and today's backends: layer0 (128 tokens), drift (128
tokens), firsttoken (natural50, all 50 prompts, 2-token continuations), logits (64,128) and union-stats (calibrated
and uniform synthetic indices). Each is the plain CLI command; the records are what those commands write (less a
resumable run's finished items). tests/test_sample_records.py fails when today's commands write records of another
format.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from glmcheck import cli
from glmcheck.records.layout import ITEMS_DIR

BACKENDS = "triton_sparse_mla,triton_sparse_mla:union2,triton_sparse_mla:union4,hf_sdpa"
RUNS = {
    "layer0": ["layer0", "--model", "ref-cpu", "--tokens", "128", "--backends", BACKENDS],
    "drift": ["drift", "--model", "ref-cpu", "--tokens", "128", "--backends", BACKENDS],
    "firsttoken": ["firsttoken", "--model", "ref-cpu", "--prompts", "natural50", "--continue", "2", "--backends",
                   "triton_sparse_mla,triton_sparse_mla:union2,hf_sdpa"],
    "logits": ["logits", "--model", "ref-cpu", "--tokens", "64,128", "--backends", BACKENDS],
    "union-stats-calibrated": ["union-stats", "--synthetic", "--mode", "calibrated"],
    "union-stats-uniform": ["union-stats", "--synthetic", "--mode", "uniform"],
}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="glmcheck/data/resources/sample_records")
    root = Path(parser.parse_args().out)
    shutil.rmtree(root, ignore_errors=True)
    for name, args in RUNS.items():
        code = cli.main(args + ["--out", str(root / name)] + (["--quiet"] if args[0] != "union-stats" else []))
        if code not in (0, 1):
            print(f"{name}: exit {code}", file=sys.stderr)
            return code
        shutil.rmtree(root / name / ITEMS_DIR, ignore_errors=True)  # a resumable run's finished items: not the record
    return 0


if __name__ == "__main__":
    sys.exit(main())
