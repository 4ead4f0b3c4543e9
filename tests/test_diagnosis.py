"""The diagnosis of FAIL rows (`glmcheck.checks.diagnosis*`): each structure named on synthetic errors beside a
synthetic band, nothing said of a legitimate row, slot-level attribution on a small call, and the checks' own FAIL
rows (layer0, drift, logits, the sweep) diagnosed in their records and tables; a PASS run diagnoses nothing."""

from __future__ import annotations

import pytest
import torch

from glmcheck.checks.diagnosis import diagnose
from glmcheck.checks.diagnosis_calls import LayerCall, band_outputs
from glmcheck.checks.diagnosis_positions import beyond_summary, summary_text
from tests.support import diagnosis_faults

FAULTS = "tests/support/diagnosis_faults.py"


def _field(seed: int = 0, tokens: int = 64, heads: int = 8, dims: int = 32):
    """An exact output, four band samples and a legitimate row around it (noise 1e-3)."""
    g = torch.Generator().manual_seed(seed)
    exact = torch.randn(tokens, heads, dims, generator=g, dtype=torch.float64)
    noisy = lambda: exact + 1e-3 * torch.randn(exact.shape, generator=g, dtype=torch.float64)  # noqa: E731
    return exact, [noisy() for _ in range(4)], noisy(), g


def _kinds(found: dict) -> dict[str, dict]:
    return {f["kind"]: f for f in found["findings"]}


def test_a_legitimate_row_gets_no_finding():
    for seed in range(4):
        exact, band, row, _ = _field(seed)
        assert diagnose(exact, row, band)["findings"] == []


def test_heads_tokens_onset_and_dims_are_named():
    exact, band, row, g = _field(1)
    heads = row.clone()
    heads[:, [2, 5]] += 3e-2 * torch.randn(64, 2, 32, generator=g, dtype=torch.float64)
    assert _kinds(diagnose(exact, heads, band))["heads"]["members"] == [2, 5]
    period = row.clone()
    period[3::4] += 2e-2 * torch.randn(16, 8, 32, generator=g, dtype=torch.float64)
    found = _kinds(diagnose(exact, period, band))["tokens"]
    assert {"family": "period", "param": [4, 3]} in found["groups"] and found["count"] == 16
    onset = row.clone()
    onset[40:] += 1e-2 * torch.randn(24, 8, 32, generator=g, dtype=torch.float64)
    assert {"family": "onset", "param": [40]} in _kinds(diagnose(exact, onset, band))["tokens"]["groups"]
    dims = row.clone()
    dims[..., 8:16] += 1e-2 * torch.randn(64, 8, 8, generator=g, dtype=torch.float64)
    assert _kinds(diagnose(exact, dims, band))["dims"]["range"] == [8, 16]


def _small_call(seed: int = 0, tokens: int = 40, heads: int = 4, topk: int = 16) -> LayerCall:
    """A causal selection of up to `topk` of each token's prefix rows, random q and kv (d_qk 80, d_v 64)."""
    g = torch.Generator().manual_seed(seed)
    indices = torch.full((tokens, topk), -1, dtype=torch.int32)
    for t in range(tokens):
        rows = torch.randperm(t + 1, generator=g)[:topk]
        indices[t, :rows.numel()] = rows.to(torch.int32)
    q = (torch.randn(tokens, heads, 80, generator=g) * 0.5).to(torch.bfloat16)
    kv = torch.randn(tokens, 80, generator=g).to(torch.bfloat16)
    return LayerCall(q, kv, indices, None, 80 ** -0.5, 64)


@pytest.mark.parametrize("fault, kind, check", [
    (diagnosis_faults.last_slot_dropped, "slots", lambda f: f["change"] == "last"),
    (diagnosis_faults.heads_swapped, "heads_swapped", lambda f: f["pairs"] == {"0": 1, "1": 0}),
    (diagnosis_faults.group_union, "slots", lambda f: f["change"] == "group_union" and f["param"] == [4]),
])
def test_slot_and_head_attribution(fault, kind, check):
    call = _small_call()
    found = _kinds(diagnose(call.exact(), call.run(fault), band_outputs(call), call=call))
    assert kind in found and check(found[kind])
    assert _kinds(diagnose(call.exact(), call.run(diagnosis_faults.ideal), band_outputs(call), call=call)) == {}


def test_positions_beyond_the_band():
    allowed = torch.ones(128)
    kl = torch.full((128,), 0.5)
    kl[3::8] = 5.0
    kl[105:109] = 5.0
    summary = beyond_summary(kl, allowed)
    assert summary["first"] == 3 and summary["runs"][0] == [105, 108] and summary["period"][:2] == [8, 3]
    assert "t = 3 mod 8" in summary_text(summary)


def test_layer0_fail_is_diagnosed_recorded_printed_and_drawn(tmp_path):
    from glmcheck.evaluate import CheckOptions, layer0
    from glmcheck.records.plots import write_plots
    from glmcheck.records.render import render
    from glmcheck.records.store import read_record

    report = layer0(CheckOptions(backends=f"band:5,hs={FAULTS}:heads_swapped", quiet=True), tokens=64)
    diagnoses = report.facts["diagnoses"]
    assert [d["backend"] for d in diagnoses] == ["hs"]  # the PASS row gets none
    assert diagnoses[0]["findings"][0]["kind"] == "heads_swapped"
    report.write(tmp_path / "record")
    text = render(read_record(tmp_path / "record").summary, read_record(tmp_path / "record").rows)
    assert "hs: heads: head 0 holds head 1's, head 1 holds head 0's exact output" in text
    assert "band:5:" not in text
    assert (tmp_path / "record" / "plot-diagnosis.png") in write_plots(tmp_path / "record")


def test_a_pass_run_diagnoses_nothing(monkeypatch):
    from glmcheck.checks import diagnosis_runs
    from glmcheck.evaluate import CheckOptions, layer0

    def no(*args, **kwargs):
        raise AssertionError("a PASS run recorded the reference's calls")

    monkeypatch.setattr(diagnosis_runs, "record_calls", no)
    report = layer0(CheckOptions(backends="band:5", quiet=True), tokens=64)
    assert report.verdict == "PASS" and report.facts["diagnoses"] == []


def test_drift_names_the_layer_where_the_error_enters():
    from glmcheck.evaluate import CheckOptions, drift

    report = drift(CheckOptions(backends=f"ls={FAULTS}:last_slot_dropped", quiet=True), tokens=64)
    first = report.facts["diagnoses"][0]
    assert first["layer"] == 0 and first["findings"][0]["kind"] == "call"
    assert first["findings"][0]["verdict"] == "FAIL" and "the error enters here" in first["findings"][0]["text"]
    assert any(f["kind"] == "slots" and f["change"] == "last" for f in first["findings"])


def test_logits_and_sweep_fail_rows_name_positions_and_layer0():
    from glmcheck.evaluate import CheckOptions, logits, sweep

    report = logits(CheckOptions(backends=f"ls={FAULTS}:last_slot_dropped", quiet=True), tokens=[64])
    row = next(r for r in report.rows if r["backend"] == "ls")
    assert "positions beyond the band, the first at" in row["diagnosis"] and row["layer0"] == "FAIL"
    assert ("glmcheck layer0 --model ref-cpu --backends ls=tests/support/diagnosis_faults.py:last_slot_dropped "
            "--tokens 64 --seed 64") in row["diagnosis"]
    report = sweep(CheckOptions(backends=f"ls={FAULTS}:last_slot_dropped", quiet=True), tokens=(32, 64))
    onset = report.extra["onsets"]["ls"]
    assert onset["layer0"] == "FAIL" and onset["beyond_first"] is not None and "--tokens 64 --seed 0" in \
        onset["diagnosis"]
    assert "where the FAIL rows leave the band" in report.render()
