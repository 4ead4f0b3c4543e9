"""The noise band and its gate: several samples, the statistics each check judges, honest options,
resume fingerprints that cover code and prompt texts, FP8 rows that compare like with like, and
the measured verdict rates."""

from __future__ import annotations

import json
import math

import pytest
import torch

from glmcheck import cli
from glmcheck.backends import register_backend, unregister_backend
from glmcheck.backends.reference import band_variant
from glmcheck.backends.registry import backend_names
from glmcheck.checks import metrics
from glmcheck.checks.band import FAIL, PASS, Band, Gate, band_from_rows
from glmcheck.checks.layer0 import run_layer0
from glmcheck.data.prompts import seeded_prompt
from glmcheck.model import build_dummy_model, make_config
from glmcheck.records.tables import fmt_sci
from glmcheck.selftest.rates import measure_rates, wilson


def _scaled(factor: float):
    held_out = band_variant(5)

    def fn(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
        return (held_out(q, kv, indices, sm_scale, d_v, topk_length=topk_length).float() * factor).bfloat16()
    return fn


def _sm_scaled(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
    return band_variant(5)(q, kv, indices, sm_scale * 1.001, d_v, topk_length=topk_length)


def _one_token_wrong(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
    out = band_variant(5)(q, kv, indices, sm_scale, d_v, topk_length=topk_length)
    out[min(20, out.shape[0] - 1)] *= 1.02
    return out


@pytest.fixture(scope="module")
def layer0():
    model = build_dummy_model(make_config("tiny", layers=1), seed=3, init="sharp")
    faults = {"t:x1.003": _scaled(1.003), "t:x1.005": _scaled(1.005), "t:sm1.001": _sm_scaled,
              "t:token": _one_token_wrong}
    for name, fn in faults.items():
        register_backend(name, fn, "test fault")
    try:
        ids = seeded_prompt(512, 128, 3, "cpu")
        yield run_layer0(model, ids, ["band:4", "band:5", *faults])
    finally:
        for name in faults:
            unregister_backend(name)


def test_band_has_several_samples_and_is_informational(layer0):
    band = [r for r in layer0.rows if r.comparison.startswith("noise band:")]
    assert [r.backend for r in band] == ["reference", "band:0", "band:1", "band:2", "band:3"]
    assert all(r.verdict == "-" for r in band) and band[0].rel_l2 == 0.0
    printed = [fmt_sci(r.rel_l2) for r in band[1:]]
    assert len(set(printed)) == len(printed), f"the variants are distinct samples to every printed digit: {printed}"
    assert "min" in layer0.facts["band_summary"] and "median" in layer0.facts["band_summary"]


def test_layer0_catches_small_scale_faults_that_rel_l2_alone_passed(layer0):
    verdicts = {r.backend: (r.verdict, r.note) for r in layer0.rows}
    assert verdicts["band:4"][0] == PASS and verdicts["band:5"][0] == PASS, "held-out legitimate variants pass"
    for fault in ("t:x1.003", "t:x1.005", "t:sm1.001", "t:token"):
        assert verdicts[fault][0] == FAIL, (fault, verdicts[fault])
    assert "scale_bias" in verdicts["t:sm1.001"][1] and "token_max_rel_l2" in verdicts["t:token"][1]
    assert layer0.verdict == FAIL


def test_temperature_bias_measures_a_softmax_scale_error(layer0):
    """The difference projected on the tempered reference's direction recovers the planted 0.1 % scale error,
    while rounding (the band, the held-out variants) and an output scale leave it near zero or far from it."""
    rows = {r.backend: r.extra for r in layer0.rows if r.backend != "reference"}
    assert rows["t:sm1.001"]["temperature_bias"] == pytest.approx(1e-3, rel=0.05)
    for name in ("band:0", "band:1", "band:2", "band:3", "band:4", "band:5"):
        assert abs(rows[name]["temperature_bias"]) < 1e-4, (name, rows[name]["temperature_bias"])
    assert "temperature-bias" in layer0.facts["gate"]
    # judged alone (scale_bias and the ratios within the band), it fails the scale fault and passes the variants
    band = band_from_rows([r for r in layer0.rows if r.comparison.startswith("noise band:")],
                          ["reference"] + [f"band:{k}" for k in range(4)])
    only = {k: rows["t:sm1.001"][k] for k in ("temperature_bias", "temperature_bias_se")}
    verdict, why = Gate().judge({"rel_l2": 0.0, **only}, band)
    assert verdict == FAIL and why.startswith("temperature_bias"), why
    held_out = {k: rows["band:4"][k] for k in ("temperature_bias", "temperature_bias_se")}
    assert Gate().judge({"rel_l2": 0.0, **held_out}, band)[0] == PASS


def test_gate_rules():
    band = Band({"rel_l2": [0.0, 1e-3, 2e-3], "scale_bias": [0.0, 1e-5, 2e-5]})
    gate = Gate(ratio=2.0)
    assert gate.judge({"rel_l2": 4e-3}, band)[0] == PASS and gate.judge({"rel_l2": 4.1e-3}, band)[0] == FAIL
    assert gate.judge({"rel_l2": 1e-3, "scale_bias": 3e-5, "scale_bias_se": 1e-6}, band)[0] == PASS
    assert gate.judge({"rel_l2": 1e-3, "scale_bias": 6e-5, "scale_bias_se": 1e-6}, band)[0] == FAIL
    tempered = Band({"rel_l2": [0.0, 1e-3, 2e-3], "temperature_bias": [0.0, -2e-5, -3e-5]})
    assert gate.judge({"rel_l2": 1e-3, "temperature_bias": -5e-5, "temperature_bias_se": 1e-6}, tempered)[0] == PASS
    verdict, why = gate.judge({"rel_l2": 1e-3, "temperature_bias": 1e-4, "temperature_bias_se": 1e-6}, tempered)
    assert verdict == FAIL and "temperature_bias" in why
    assert gate.margin({"rel_l2": 1e-3, "temperature_bias": 1e-4, "temperature_bias_se": 0.0}, tempered) > 1
    assert Gate(cap=1e-3).judge({"rel_l2": 2e-3}, band)[0] == FAIL, "a cap only makes the gate stricter"
    assert Gate(cap=1.0).judge({"rel_l2": 5e-3}, band)[0] == FAIL, "a loose cap never passes a row outside the band"
    assert gate.judge({"rel_l2": math.nan}, band)[0] == FAIL
    assert gate.margin({"rel_l2": 2e-3}, band) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="cap must be a positive number"):
        Gate(cap=math.inf)


def test_metrics_of_the_band():
    e = torch.randn(64, 4, 8, dtype=torch.float64)
    bias, se = metrics.scale_bias(e * 1.01, e)
    assert bias == pytest.approx(0.01) and se > 0
    assert metrics.direction_bias(e * 1.01, e, e) == (bias, se), "scale_bias is the bias along the output itself"
    u = torch.randn(64, 4, 8, dtype=torch.float64)
    noise = 1e-4 * torch.randn(64, 4, 8, dtype=torch.float64)
    bias, se = metrics.direction_bias(e + 2e-3 * u + noise, e, u)
    assert bias == pytest.approx(2e-3, abs=6 * se) and 0 < se < 2e-4
    assert metrics.direction_bias(e + noise, e, torch.zeros_like(u)) == (0.0, 0.0)
    assert math.isnan(metrics.direction_bias(e, e, u * math.nan)[0])
    a = e.clone()
    a[7] *= 2
    assert metrics.token_max_rel_l2(a, e) == pytest.approx(1.0) and metrics.rel_l2(a, e) < 0.3


def run_cli(args, capsys):
    code = cli.main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("args, words", [
    (["drift", "--backends", "reference"], "--backends names no backend under test"),
    (["layer0", "--backends", "hf_sdpa,band:1"], "--backends names no backend under test"),
    (["layer0", "--band", "0"], "--band must be an int >= 1"),
    (["layer0", "--max-rel-l2", "0"], "--max-rel-l2 must be a finite number > 0"),
    (["firsttoken", "--max-dlogprob", "nan"], "--max-dlogprob must be a finite number > 0"),
])
def test_dishonest_options_are_usage_errors(args, words, capsys, tmp_path):
    code, _, err = run_cli(args + ["--out", str(tmp_path / "x")], capsys)
    assert code == 2 and err.count("\n") == 1 and words in err, err
    assert not (tmp_path / "x").exists()


def test_fp8_hf_rows_are_labelled_and_out_of_the_verdict(tmp_path, capsys):
    code, printed, _ = run_cli(["layer0", "--tokens", "40", "--quiet", "--kv-cache-dtype", "fp8_e4m3",
                                "--backends", "band:5,hf_sdpa", "--out", str(tmp_path / "f")], capsys)
    assert code == 0, printed
    assert "not comparable under FP8" in printed
    row = next(line for line in printed.splitlines() if line.startswith("| hf_sdpa"))
    assert "| -       |" in row
    import pandas as pd  # the band's odd members read the pool as an FP8 kernel does: their rows say so
    comparisons = list(pd.read_parquet(tmp_path / "f" / "rows.parquet")["comparison"])
    assert "noise band: band:1 vs reference (ideal FP8 kernel)" in comparisons, comparisons
    assert "noise band: band:0 vs reference (ideal bf16 kernel)" in comparisons, comparisons


def test_band_members_are_labelled_by_how_they_read_the_cache():
    from glmcheck.checks.band import ideal_kind
    assert [ideal_kind(f"band:{k}", "fp8_e4m3") for k in range(4)] == ["ideal bf16 kernel", "ideal FP8 kernel"] * 2
    assert {ideal_kind(f"band:{k}", kv) for k in range(4) for kv in (None, "bf16")} == {"ideal bf16 kernel"}


def _prompts_file(path, text):
    path.write_text(json.dumps({"id": "p1", "prompt": text}) + "\n")
    return str(path)


def test_resume_refuses_an_edited_prompt_and_changed_backend_code(tmp_path, capsys):
    prompts = _prompts_file(tmp_path / "p.jsonl", "The capital of France is")
    kernel = tmp_path / "mykernel.py"
    kernel.write_text("from glmcheck.backends.reference import band_variant\n"
                      "def fn(q, kv, i, s, d_v=512, *, topk_length=None):\n"
                      "    return band_variant(5)(q, kv, i, s, d_v, topk_length=topk_length)\n")
    out = tmp_path / "run"
    args = ["firsttoken", "--prompts", prompts, "--quiet", "--band", "2", "--out", str(out),
            "--backends", f"resume_kernel={kernel}:fn"]
    try:
        _refused_on_edits(args, tmp_path, kernel, capsys)
    finally:
        if "resume_kernel" in backend_names():
            unregister_backend("resume_kernel")


def _refused_on_edits(args, tmp_path, kernel, capsys):
    code, _, err = run_cli(args, capsys)
    assert code in (0, 1, 3), err  # a band of 2 cannot judge (INCONCLUSIVE, exit 3): the run only has to run
    _prompts_file(tmp_path / "p.jsonl", "The capital of Italy is")
    code, _, err = run_cli(args, capsys)
    assert code == 2 and "prompts" in err and err.count("\n") == 1, err
    _prompts_file(tmp_path / "p.jsonl", "The capital of France is")
    kernel.write_text(kernel.read_text() + "# fixed\n")
    unregister_backend("resume_kernel")
    code, _, err = run_cli(args, capsys)
    assert code == 2 and "code" in err, err


def test_wilson_interval():
    low, high = wilson(0, 20)
    assert low == 0.0 and 0.15 < high < 0.17
    assert wilson(20, 20)[0] > 0.8


@pytest.mark.slow  # ~2 minutes in the interpreter; the 20-seed figures it stands for are measured on the GPU
def test_verdict_rates_on_tiny():
    """A CI-sized rates run: layer0 over 3 seeds, no false alarm and every fault caught (the five structural ones
    included); logits and
    drift run once (their rates are reported, not barred). The 20-seed figures: docs/reliability.md."""
    device = "cuda" if torch.cuda.is_available() else "cpu"  # the interpreter only runs CPU tensors
    # 40 tokens: the duplicate-row fault reads tokens 0, 32, ... that have two valid slots (token 0 has one)
    tallies = measure_rates("tiny", range(3), 40, ["layer0"], device=device)
    legit = [t for t in tallies if t.legitimate]
    faults = [t for t in tallies if not t.legitimate]
    assert len(faults) == 10 and all(t.runs == 3 for t in tallies)
    assert sum(t.fails for t in legit) == 0, [(t.backend, t.margins) for t in legit if t.fails]
    assert all(t.fails == t.runs for t in faults), [(t.backend, t.margins) for t in faults if t.wrong]
    once = measure_rates("tiny", [0], 24, ["logits", "drift"], device=device)
    assert {t.check for t in once} == {"logits", "drift"} and all(t.runs == 1 for t in once)


def test_two_distances_per_row(tmp_path, capsys):
    """Every row gives its distance to the exact reference (judged) and to the baseline kernel."""
    code, printed, _ = run_cli(["layer0", "--tokens", "40", "--quiet", "--baseline", "band:5", "--exact", "fp64",
                                "--backends", "band:4", "--out", str(tmp_path / "d")], capsys)
    assert code == 0, printed
    assert "| rel L2 " in printed and "| vs band:5 " in printed  # the terminal's headers (wide: rel L2 (band:5))
    from glmcheck.records.store import read_record

    record = read_record(tmp_path / "d")
    row = record.rows[record.rows["backend"] == "band:4"].iloc[0]
    assert row["against"] == "reference:fp64" and 0 < row["rel_l2_vs_band:5"] < row["rel_l2"] * 2
    assert record.summary["options"]["baseline"] == "band:5"
