"""`glmcheck drift` on tiny: bands, layer count, and a fault planted in one layer."""

from __future__ import annotations

import torch

from glmcheck import cli
from glmcheck.backends import register_backend, unregister_backend
from glmcheck.backends.reference import sparse_mla_reference
from glmcheck.checks.drift import run_drift
from glmcheck.checks.rows import FAIL, PASS
from glmcheck.data.prompts import seeded_prompt
from glmcheck.model import build_dummy_model, make_config
from glmcheck.records.store import read_record

FAULTY_LAYER = 1


class FaultAtCall:
    """The fp32 reference, except on its n-th call (= layer n at tp 1), where V is scaled by 1.5."""

    def __init__(self, n: int):
        self.n, self.calls = n, 0

    def __call__(self, q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
        out = sparse_mla_reference(q, kv, indices, sm_scale, d_v, topk_length=topk_length, dtype=torch.float32)
        self.calls += 1
        return out * 1.5 if self.calls - 1 == self.n else out


def test_planted_fault_shows_first_at_its_layer(tmp_path):
    device = "cuda" if torch.cuda.is_available() else "cpu"  # the interpreter only runs CPU tensors
    model = build_dummy_model(make_config("tiny"), seed=1, init="sharp", device=device)
    ids = seeded_prompt(512, 48, 0, device)
    register_backend("planted:layer-fault", FaultAtCall(FAULTY_LAYER), fp32_output=True)  # the fp32 reference
    try:
        result = run_drift(model, ids, ["triton_sparse_mla", "planted:layer-fault"], "reference")
    finally:
        unregister_backend("planted:layer-fault")
    layers = model.config.num_hidden_layers
    control = [r for r in result.rows if r.comparison.startswith("noise band: reference vs itself")]
    assert len(control) == layers and all(r.rel_l2 == 0.0 for r in control), "deterministic: zero control"
    band = [r for r in result.rows if r.comparison.startswith("noise band:")]
    assert len(band) == 5 * layers and all(r.verdict == "-" for r in band)
    planted = sorted((r for r in result.rows if r.backend == "planted:layer-fault"), key=lambda r: r.extra["layer"])
    assert [r.extra["layer"] for r in planted] == list(range(layers))
    first_fail = next(r.extra["layer"] for r in planted if r.verdict == FAIL)
    assert first_fail == FAULTY_LAYER
    assert all(r.rel_l2 == 0.0 for r in planted[:FAULTY_LAYER]), "before the fault it is the reference"
    triton = [r for r in result.rows if r.backend == "triton_sparse_mla"]
    assert len(triton) == layers and all(r.verdict == PASS for r in triton)


def test_drift_cli_record(tmp_path, capsys):
    out = tmp_path / "drift"
    code = cli.main(["drift", "--tokens", "40", "--quiet", "--backends", "band:5", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0 and "per-layer hidden-state drift, 40 tokens, 3 layers" in printed
    rows = read_record(out).rows
    assert sorted(rows[rows["backend"] == "band:5"]["layer"]) == [0, 1, 2]
