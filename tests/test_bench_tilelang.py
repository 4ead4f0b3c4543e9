"""SGLang's TileLang prefill as a bench peer (issue 74), on the CPU with a stand-in for SGLang's module
(tests/support/sglang_tilelang_standin.py, loaded by path as the real file is): how it is found and said, where it
refuses, its gate before any timing, its cells and the peer table, paired rounds against our fastest path, and the
GPU script's probe."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from glmcheck.backends import tilelang_sparse
from glmcheck.backends.tilelang_sparse import (
    ENV_HEADS,
    ENV_MODULE,
    TileLangRefused,
    TileLangUnavailable,
    find_tilelang,
    tilelang_available,
    tilelang_refusal,
    tilelang_sparse_prefill,
)
from glmcheck.bench.kernel import BEST, BenchPoint, default_specs, make_inputs, run_point
from glmcheck.bench.tables import render_table
from tests.support.script_loader import load_script

STANDIN = str(Path(__file__).parent / "support" / "sglang_tilelang_standin.py")


@pytest.fixture
def standin(monkeypatch):
    """The stand-in as $GLMCHECK_TILELANG_MODULE, freshly loaded: its module's globals (calls, scale_error, ...)."""
    monkeypatch.setattr(tilelang_sparse, "_cache", {})
    monkeypatch.setenv(ENV_MODULE, STANDIN)
    monkeypatch.delenv(ENV_HEADS, raising=False)
    return find_tilelang().forward.__globals__


def counting_timer(timed: list):
    """Each timed call runs once and measures 10, 9, 8, ... ms in the order it is timed."""
    def timer(fn, rep_ms=100):
        fn()
        timed.append(fn)
        return 11.0 - len(timed)
    return timer


def test_the_module_file_loads_with_platform_answers_for_cuda_and_leaves_no_sglang_behind(standin):
    import sys

    present, source = tilelang_available()
    assert present and source == f"SGLang's tilelang_sparse_fwd from file {STANDIN} (tilelang not imported)"
    assert standin["PLATFORM"] == (torch.version.hip is not None, False, False)
    assert not [name for name in sys.modules if name.split(".")[0] == "sglang"], "the stubs outlived the import"


def test_absent_says_what_was_tried(monkeypatch):
    monkeypatch.setattr(tilelang_sparse, "_cache", {})
    monkeypatch.delenv(ENV_MODULE, raising=False)
    present, why = tilelang_available()
    assert not present and why.startswith("TileLang sparse prefill not found (tried: $GLMCHECK_TILELANG_MODULE unset; "
                                          "sglang.kernels.ops.attention.dsa.tilelang_kernel: ModuleNotFoundError")
    with pytest.raises(TileLangUnavailable, match="does not exist"):
        find_tilelang("/nowhere/tilelang_kernel.py")


@pytest.mark.parametrize("heads, d_qk, d_v, topk, reason", [
    (8, 576, 512, 2048, None), (16, 576, 512, 2048, None), (128, 576, 512, 2048, None), (64, 576, 512, 100, None),
    (96, 576, 512, 2048, "96 heads: above 64 it takes multiples of 64 only"),
    (8, 576, 512, 2100, "top-k 2100 pads to 33 blocks of 64"),
    (8, 576, 500, 2048, "d_v 500 is not a power of two"),
    (8, 512, 512, 2048, "rope tail d_qk - d_v = 0 is not a power of two")])
def test_refusals_follow_the_modules_asserts(monkeypatch, heads, d_qk, d_v, topk, reason):
    monkeypatch.delenv(ENV_HEADS, raising=False)
    why = tilelang_refusal(heads, d_qk, d_v, topk)
    assert why is None if reason is None else why.startswith(reason), why


def test_head_counts_a_probe_left_out_are_refused(monkeypatch):
    monkeypatch.setenv(ENV_HEADS, "16,32")
    assert tilelang_refusal(16, 576, 512, 2048) is None
    assert tilelang_refusal(8, 576, 512, 2048) == ("8 heads not in $GLMCHECK_TILELANG_HEADS=16,32 "
                                                   "(its probe did not pass)")


def test_called_as_sglang_calls_it(standin):
    """Heads unpadded, rows [S, 1, d_qk], the top-k padded with -1 to a multiple of 64 as int32 [T, 1, topk];
    topk_length masks the slots past it; the output is [T, H, d_v] and matches the reference."""
    x = make_inputs(BenchPoint(1, 24, 8), topk=100, device="cpu")
    out = tilelang_sparse_prefill(x.q, x.kv, x.indices, x.sm_scale, 512)
    assert standin["calls"][-1] == ((24, 8, 576), (24, 1, 576), (24, 1, 128), torch.int32)
    from glmcheck.backends.reference import sparse_mla_reference
    reference = sparse_mla_reference(x.q, x.kv, x.indices, x.sm_scale, 512, dtype=torch.float32)
    assert out.shape == (24, 8, 512) and torch.allclose(out.float(), reference, atol=1e-2)
    short = torch.full((24,), 3, dtype=torch.int32)
    clipped = tilelang_sparse_prefill(x.q, x.kv, x.indices, x.sm_scale, 512, topk_length=short)
    expected = sparse_mla_reference(x.q, x.kv, x.indices, x.sm_scale, 512, topk_length=short, dtype=torch.float32)
    assert torch.allclose(clipped.float(), expected, atol=1e-2)
    with pytest.raises(TileLangRefused, match="96 heads"):
        tilelang_sparse_prefill(torch.zeros(2, 96, 576, dtype=torch.bfloat16), x.kv, x.indices[:2], x.sm_scale)


def test_the_column_is_gated_refused_and_tabled(standin):
    """The tilelang column is gated like every column: right, it is timed; a planted wrong scale fails its gate and is
    never timed; 96 heads is a refused cell, said under the peer table; the peer table sets our fastest path against
    it, and paired rounds pit "best" (our fastest path there) against it."""
    specs = [s for s in default_specs(flashmla=False, tilelang=True) if s.name in ("per-token", "union2", "tilelang")]
    timed: list = []
    results = run_point(BenchPoint(1, 24, 8), specs, topk=128, device="cpu", timer=counting_timer(timed),
                        pairs=[(BEST, "tilelang")], pair_rounds=2)
    by_name = {r.backend: r for r in results}
    assert by_name["tilelang"].ms == 8.0 and by_name["tilelang"].rel_l2 < 3e-3
    paired = by_name[f"{BEST} / tilelang"]
    assert paired.note == "2 paired rounds; best = union2"  # 9 ms against per-token's 10
    assert paired.ratios == (4.0 / 3.0, 1.0 / 2.0) and timed[6] is timed[1] and timed[7] is timed[2], \
        "union2's call against tilelang's, in alternating order"
    standin["scale_error"] = 1.1
    planted = run_point(BenchPoint(1, 24, 8), specs[-1:], topk=128, device="cpu", timer=counting_timer(timed := []))
    assert planted[0].ms is None and planted[0].note.startswith("gate failed"), planted[0]
    assert len(timed) == 3, "only the three union builds: the failed column never reaches the timer"
    standin["scale_error"] = 1.0
    refused = run_point(BenchPoint(1, 24, 96), specs[-1:], topk=128, device="cpu", timer=lambda fn, rep_ms: 1.0)
    assert refused[0].ms is None and refused[0].note == "refused: 96 heads: above 64 it takes multiples of 64 only"
    table = render_table(results + refused)
    assert "| 1x24 H=96 |" in table and "refused" in table.split("Our fastest exact path")[0]
    peers = table.split("Our fastest exact path")[1]
    row = next(line for line in peers.splitlines() if line.startswith("| 1x24 H=8 "))
    assert [cell.strip() for cell in row.split("|")[1:-1]] == ["1x24 H=8", "union2", "9.000", "-", "8.000", "-",
                                                              "0.89x", "0.89x"]
    assert "tilelang at 1x24 H=96: refused: 96 heads" in peers and "geomean of the best peer / best ours: H=8 0.89x" \
        in peers


def test_a_failing_peer_ends_its_cell_not_the_bench(standin):
    standin["fail_with"] = RuntimeError("nvcc failed")
    specs = [s for s in default_specs(flashmla=False, tilelang=True) if s.name in ("tilelang", "per-token")]
    results = {r.backend: r for r in run_point(BenchPoint(1, 24, 8), specs, topk=128, device="cpu",
                                                timer=lambda fn, rep_ms: 1.0)}
    assert results["tilelang"].note == "failed: RuntimeError: nvcc failed" and results["per-token"].ms == 1.0
    assert "failed" in render_table(list(results.values()))


def test_paired_option_takes_several_pairs_and_best():
    from glmcheck.evaluate.kernel_bench import paired_option
    specs = default_specs(flashmla=True, tilelang=True)
    assert paired_option("best,tilelang;best,flashmla+len", specs) == [("best", "tilelang"), ("best", "flashmla+len")]
    with pytest.raises(ValueError, match="--paired takes two different backends"):
        paired_option("best,tilelang;best", specs)
    with pytest.raises(ValueError, match="--paired takes two different backends"):
        paired_option("best,tilelang", default_specs(flashmla=False))


def test_the_gpu_scripts_probe_reports_one_line_per_head_count(standin):
    probe = load_script("gpu_tilelang_probe").probe
    code, line = probe(8, 24, device="cpu", topk=128)
    assert code == 0 and line.startswith("H=8 ok: rel-L2 ") and "first call" in line, line
    code, line = probe(96, 24, device="cpu", topk=128)
    assert code == 1 and line.startswith("H=96 refused: 96 heads"), line
