"""Benchmark plumbing on the CPU (interpreter, tiny shapes): the correctness gate comes first."""

from __future__ import annotations

import pytest
import torch

from glmcheck import cli
from glmcheck.bench.kernel import D_V, BenchPoint, BenchSpec, default_specs, length_pairs, run_point
from glmcheck.bench.tables import render_accuracy, render_table
from glmcheck.kernels import sparse_mla_prefill


def fake_timer(calls: list):
    def timer(fn, rep_ms=100):
        fn()
        calls.append(fn)
        return 1.0
    return timer


def wrong_scale(x, out):
    """A planted wrong backend: the softmax scale is off by 10 %."""
    return sparse_mla_prefill(x.q, x.kv, x.indices, x.sm_scale * 1.1, D_V, out=out)


def test_gate_rejects_a_wrong_backend_before_timing():
    timed: list = []
    specs = [s for s in default_specs(flashmla=False) if s.name in ("per-token", "union2", "union2+len",
                                                                        "union2+len+plan")]
    specs.append(BenchSpec("planted:wrong-scale", wrong_scale))
    device = "cuda" if torch.cuda.is_available() else "cpu"  # the interpreter only runs CPU tensors
    results = run_point(BenchPoint(1, 40, 8), specs, topk=16, device=device, timer=fake_timer(timed))
    by_name = {r.backend: r for r in results}
    assert by_name["per-token"].ms == 1.0 and by_name["union2"].ms == 1.0 and by_name["union2+len+plan"].ms == 1.0
    assert by_name["union2+len+plan"].rel_l2 == by_name["union2+len"].rel_l2  # a ready plan gives the same bits
    wrong = by_name["planted:wrong-scale"]
    assert wrong.ms is None and "gate failed" in wrong.note and wrong.rel_l2 > 3e-3
    assert by_name["build2"].ms == 1.0 and by_name["build4"].ms == 1.0 and by_name["build8"].ms == 1.0
    assert len(timed) == 7, "the failed backend must never reach the timer"
    table = render_table(results)
    assert "planted:wrong-scale ms" in table and "| -" in table


def test_bench_refuses_on_cpu(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert cli.main(["bench", "--quick"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def fake_capture(fn):
    """Stands in for a CUDA graph on the CPU: the captured call's output, and a replay that runs
    the call again (so a backend returning a fresh tensor each call leaves that output unwritten,
    as a graph whose replay writes somewhere else would)."""
    output = fn()
    return fn, output


def fresh_tensor_backend(x, out):
    """Correct values, but a new tensor per call: the captured output is never rewritten."""
    return sparse_mla_prefill(x.q, x.kv, x.indices, x.sm_scale, D_V)


def capture_refused(fn):
    raise RuntimeError("operation not permitted when stream is capturing")


def test_graph_timing_gates_each_replay_before_timing():
    timed: list = []
    specs = [s for s in default_specs(flashmla=False) if s.name in ("per-token", "union2")]
    specs.append(BenchSpec("planted:fresh-output", fresh_tensor_backend))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    results = run_point(BenchPoint(1, 24, 8), specs, topk=16, device=device, timer=fake_timer(timed),
                        timing="graph", capture=fake_capture)
    by_name = {r.backend: r for r in results}
    assert by_name["per-token"].ms == 1.0 and by_name["per-token"].note == "CUDA graph replay"
    assert by_name["union2"].ms == 1.0
    planted = by_name["planted:fresh-output"]
    assert planted.ms is None and planted.note.startswith("graph replay gate failed"), planted.note
    assert len(timed) == 5, "the backend whose replay failed its gate must never reach the timer"
    refused = run_point(BenchPoint(1, 24, 8), specs[:1], topk=16, device=device, timer=fake_timer([]),
                        timing="graph", capture=capture_refused)
    assert refused[0].ms is None and "graph capture failed" in refused[0].note


def test_bad_timing_and_graph_with_model_are_refused(capsys):
    with pytest.raises(ValueError, match="timing must be one of"):
        run_point(BenchPoint(1, 24, 8), [], topk=16, device="cpu", timing="graphs")
    assert cli.main(["bench", "--model", "tiny", "--timing", "graph"]) == 2
    assert "--timing graph applies to the kernel bench" in capsys.readouterr().err


@pytest.mark.gpu
def test_gpu_graph_timing_every_backend():
    """On the GPU every backend of the table (FlashMLA when present) is captured, its replay
    gated and timed."""
    from glmcheck.backends import flashmla_available

    specs = [s for s in default_specs(flashmla_available()[0]) if s.name != "torch_bf16"]
    results = run_point(BenchPoint(1, 1024, 8), specs, quick=True, timing="graph")
    for r in results:
        assert r.ms is not None and r.ms > 0, f"{r.backend}: {r.note}"
        if not r.backend.startswith("build"):
            assert r.note == "CUDA graph replay"


def test_geomean_is_reported_per_head_count():
    """The table's summary gives the H = 8 headline points their own geomean (the issue's target),
    apart from the extra head counts, and then the geomean over every point."""
    from glmcheck.bench.kernel import BenchResult

    def point_results(point, ours, flash_len, flash):
        return [BenchResult(point, "per-token", ours, 1e-3, ""),
                BenchResult(point, "flashmla+len", flash_len, 1e-3, ""),
                BenchResult(point, "flashmla", flash, 1e-3, "")]

    results = (point_results(BenchPoint(1, 2048, 8), 1.0, 2.0, 3.0)       # 2x over the faster peer
               + point_results(BenchPoint(1, 4096, 8), 1.0, 9.0, 8.0)     # 8x
               + point_results(BenchPoint(1, 8192, 64), 2.0, 1.0, None))  # 0.5x; flashmla missing
    line = render_table(results).splitlines()[-1]
    assert line.endswith("H=8 4.00x over 2 points; H=64 0.50x over 1 point; all 2.00x over 3 points")


def test_length_forms_are_gated_timed_and_paired_where_their_path_applies():
    """Each path runs with and without topk_length; union paths only where G*H is legal (at H = 32
    union 4 and 8 would run the per-token path, so they are not columns); each path's two forms
    are timed alternately in paired rounds and the table gives their median ratio."""
    order: list = []
    specs = [s for s in default_specs(flashmla=False) if s.name != "torch_bf16"]
    pairs = length_pairs(specs)
    assert pairs == [("per-token+len", "per-token"), ("union2+len", "union2"), ("union4+len", "union4"),
                     ("union8+len", "union8")]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    results = run_point(BenchPoint(1, 24, 32), specs, topk=16, device=device, timer=fake_timer(order),
                        pairs=pairs, pair_rounds=3)
    names = [r.backend for r in results if not r.ratios]
    assert names == ["per-token", "per-token+len", "union2", "union2+len", "union2+len+plan", "build2", "build4",
                     "build8"]
    paired = {r.backend: r for r in results if r.ratios}
    assert set(paired) == {"per-token+len / per-token", "union2+len / union2"}
    assert paired["union2+len / union2"].ratios == (1.0, 1.0, 1.0)
    assert len(order) == len(names) + 2 * 2 * 3
    table = render_table(results)
    last = [cell.strip() for cell in table.splitlines()[-1].split("|")]
    assert "paired rounds" in table and last[1:4] == ["1x24 H=32", "1.000 (1.000-1.000)", "1.000 (1.000-1.000)"]


def test_per_token_compaction_is_timed_alone_where_the_pingpong_tile_runs_it(monkeypatch):
    """Where the per-token path runs the ping-pong tile (faked here: the tile needs Hopper) its row compaction is
    timed alone like the union builds, a column of its own; elsewhere (the Triton tile compacts nothing) there is
    no such column."""
    from glmcheck.bench import kernel as bench_kernel
    from glmcheck.kernels.prefill import Route

    specs = [s for s in default_specs(flashmla=False) if s.name == "per-token+len"]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    plain = run_point(BenchPoint(1, 24, 64), specs, topk=16, device=device, timer=fake_timer([]))
    assert "compaction" not in [r.backend for r in plain]
    compacted: list = []
    real = bench_kernel.token_row_sets
    monkeypatch.setattr(bench_kernel, "kernel_route", lambda *args, **kwargs: Route(1, "gluon-pingpong"))
    monkeypatch.setattr(bench_kernel, "token_row_sets", lambda *args: compacted.append(args) or real(*args))
    timed: list = []
    results = run_point(BenchPoint(1, 24, 64), specs, topk=16, device=device, timer=fake_timer(timed))
    by_name = {r.backend: r for r in results}
    assert by_name["compaction"].ms == 1.0 and "compaction" in by_name["compaction"].note
    assert compacted and compacted[0][1] is not None, "timed with topk_length, as the +len path passes it"
    assert "compaction ms" in render_table(results)


def test_paired_ratios_alternate_which_side_runs_first():
    seen: list[str] = []
    times = {"a": 2.0, "b": 1.0}

    def timer(fn, rep_ms):
        seen.append(fn())
        return times[seen[-1]]

    from glmcheck.bench.kernel import paired_ratios
    assert paired_ratios(lambda: "a", lambda: "b", 3, timer, rep_ms=10) == (2.0, 2.0, 2.0)
    assert seen == ["a", "b", "b", "a", "a", "b"]


@pytest.mark.parametrize("text, message", [("1x8192", "BxS:H items"), ("1x8192:0", "heads in 1..128"),
                                           ("0x10:8", "must be >= 1"), ("1x8192:8,,", "BxS:H items")])
def test_bad_points_are_refused_naming_the_option(text, message):
    from glmcheck.bench.kernel import parse_points
    with pytest.raises(ValueError, match="--points") as err:
        parse_points(text)
    assert message in str(err.value)


def test_default_points_are_the_contract_points():
    from glmcheck.bench.kernel import DEFAULT_POINTS, parse_points
    labels = [p.label for p in parse_points(DEFAULT_POINTS)]
    assert labels[:5] == ["1x2048 H=8", "1x4096 H=8", "1x8192 H=8", "2x4096 H=8", "4x2048 H=8"]
    assert labels[5:] == ["1x8192 H=16", "1x8192 H=32", "1x8192 H=64", "1x8192 H=96", "1x8192 H=128",
                          "1x2048 H=64", "1x2048 H=128"]


def test_graph_call_keeps_the_tensors_its_replays_write_alive():
    """A CUDA graph holds no reference to the tensors it writes: the timed replay call must keep its
    output alive, or each replay writes into memory the allocator has handed out again (seen as an
    illegal address in paired graph rounds at 1 x 2048, H = 128, before this was kept)."""
    import gc
    import weakref

    from glmcheck.backends.reference import sparse_mla_reference
    from glmcheck.bench.kernel import gated_call, make_inputs
    device = "cuda" if torch.cuda.is_available() else "cpu"
    spec = next(s for s in default_specs(flashmla=False) if s.name == "per-token")
    inputs = make_inputs(BenchPoint(1, 24, 8), topk=16, device=device)
    reference = sparse_mla_reference(inputs.q, inputs.kv, inputs.indices, inputs.sm_scale, D_V, dtype=torch.float32)
    written: list[weakref.ref] = []

    def capture(fn):  # like a graph: each replay rewrites the output's memory, referencing nothing
        output = fn()
        value, target = output.clone(), weakref.ref(output)
        written.append(target)
        return (lambda: target().copy_(value)), output

    call, _, note = gated_call(spec, inputs, reference, "graph", capture)
    gc.collect()
    assert note == "CUDA graph replay" and written[0]() is not None, "the replayed output was freed"
    del call
    gc.collect()
    assert written[0]() is None


def test_paired_option_names_two_backends_of_the_table():
    from glmcheck.evaluate.kernel_bench import paired_option as _paired
    specs = default_specs(flashmla=False)
    assert _paired("per-token,union2", specs) == [("per-token", "union2")]
    assert _paired(None, specs) == []
    for bad in ("per-token", "per-token,per-token", "per-token,flashmla+len"):
        with pytest.raises(ValueError, match="--paired takes two different backends"):
            _paired(bad, specs)


def test_accuracy_table_gives_our_worst_against_flashmlas_best():
    from glmcheck.bench.kernel import BenchResult
    point = BenchPoint(1, 8192, 64)
    results = [BenchResult(point, "per-token", 1.0, 2.0e-3, ""), BenchResult(point, "per-token+len", 1.0, 2.5e-3, ""),
               BenchResult(point, "flashmla+len", 1.0, 2.2e-3, ""), BenchResult(point, "flashmla", 1.0, 2.1e-3, ""),
               BenchResult(point, "build2", 1.0, None, "")]
    table = render_accuracy(results, "fp64")
    assert "fp64 reference" in table
    row = [cell.strip() for cell in table.splitlines()[-1].split("|")]
    assert row[1:5] == ["1x8192 H=64", "2.500000000e-03", "2.100000000e-03", "+4.000e-04"]
    assert render_accuracy(results[:2], "fp64") == "", "no FlashMLA, no margin"
