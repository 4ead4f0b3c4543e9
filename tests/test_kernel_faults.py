"""A plug-in kernel that raises, returns the wrong shape or returns fp32 instead of bf16 is a FAIL row naming the
backend and the error in every in-process check, beside the intact band and the other rows, with the record
written and exit 1 (issue 54); glmcheck's own kernels raising stay glmcheck's errors."""

from __future__ import annotations

import json

import pytest
import torch

from glmcheck import cli
from glmcheck.backends.errors import KernelFault
from glmcheck.evaluate import CheckOptions, drift, firsttoken, layer0, logits, sweep
from glmcheck.model.kernel_call import check_output

KERNELS = "tests/support/broken_kernels.py"
BROKEN = {"raises": "raised RuntimeError: CUDA error: an illegal memory access",
          "shape": "returned shape [", "fp32": "returned float32, expected bfloat16"}
SPECS = [f"raises={KERNELS}:raises", f"shape={KERNELS}:wrong_shape", f"fp32={KERNELS}:fp32_out",
         f"ok={KERNELS}:correct"]


def _rows(report) -> list[dict]:
    rows = report.extra.get("summary_rows") or report.rows
    return [r if isinstance(r, dict) else r.as_dict() for r in rows]


@pytest.mark.parametrize("check, kwargs", [(layer0, {}), (logits, {}), (drift, {}), (firsttoken, {"limit": 2}),
                                           (sweep, {"tokens": (32, 64)})], ids=lambda x: getattr(x, "__name__", ""))
def test_every_check_fails_a_broken_plugin_by_name(check, kwargs):
    report = check(CheckOptions(model="tiny", backends=SPECS, quiet=True), **kwargs)
    rows = _rows(report)
    assert report.verdict == "FAIL"
    for name, words in BROKEN.items():
        mine = [r for r in rows if r["backend"] == name]
        assert mine and all(r["verdict"] == "FAIL" and words in r["note"] for r in mine), (name, mine)
    assert all(r["verdict"] == "PASS" for r in rows if r["backend"] == "ok"), "the correct plug-in's rows"
    band = [r for r in rows if r["backend"].startswith("band:")]
    assert band and all(r["verdict"] == "-" for r in band), "the band rows stay"


def test_the_cli_writes_the_record_and_exits_1(tmp_path, capsys):
    out = tmp_path / "r"
    code = cli.main(["layer0", "--model", "tiny", "--backends", ",".join(SPECS), "--quiet", "--out", str(out)])
    printed = capsys.readouterr()
    assert code == 1 and "Traceback" not in printed.err, printed.err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verdict"] == "FAIL" and "raised RuntimeError" in printed.out
    assert cli.main(["report", str(out)]) == 1


def test_the_output_contract():
    q = torch.zeros(4, 2, 12, dtype=torch.bfloat16)
    check_output("k", torch.zeros(4, 2, 8, dtype=torch.bfloat16), q, 8, fp32_output=False)
    check_output("reference", torch.zeros(4, 2, 8, dtype=torch.float64), q, 8, fp32_output=True)
    for out, words in [(torch.zeros(4, 2, 8), "returned float32, expected bfloat16"),
                       (torch.zeros(4, 2, 8, dtype=torch.float16), "returned float16"),
                       (torch.zeros(4, 3, 8, dtype=torch.bfloat16), "returned shape [4, 3, 8], expected [4, 2, 8]"),
                       ((torch.zeros(4, 2, 8, dtype=torch.bfloat16),), "returned a tuple")]:
        with pytest.raises(KernelFault, match=words.replace("[", r"\[")):
            check_output("k", out, q, 8, fp32_output=False)
    with pytest.raises(KernelFault, match="returned bfloat16, expected float32 or float64"):
        check_output("reference", torch.zeros(4, 2, 8, dtype=torch.bfloat16), q, 8, fp32_output=True)
