"""Run by tests/test_torchrun.py under torchrun (2 ranks, gloo, CPU): layer0, logits and firsttoken on the FP8
checkpoint argv[1] with --weights fp8 and with --weights bf16, in one process group; rank 0 writes every report's
rows (and firsttoken's per-backend rows) to argv[2] as JSON."""

from __future__ import annotations

import json
import sys

from glmcheck import evaluate
from glmcheck.model import distributed


def main(path: str, out: str) -> None:
    context = distributed.init_from_env(2, "cpu")
    results = {}
    for weights in ("fp8", "bf16"):
        options = evaluate.CheckOptions(checkpoint=path, weights=weights, tp=2, device="cpu", quiet=True, band=1,
                                        backends=["reference:bf16"])
        reports = {"layer0": evaluate.layer0(options, tokens=32), "logits": evaluate.logits(options, tokens=[24]),
                   "firsttoken": evaluate.firsttoken(options, prompts="natural50", limit=1)}
        results[weights] = {name: {"rows": r.rows, "extra": r.extra, "verdict": r.verdict, "model": r.model}
                            for name, r in reports.items()}
    if context.is_main:
        with open(out, "w") as handle:
            json.dump(results, handle, sort_keys=True)
    distributed.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
