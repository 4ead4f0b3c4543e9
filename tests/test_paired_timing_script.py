"""scripts/paired_timing.py (GPU: two bench backends timed alternately at one point): choosing the
pair, the gates before anything is timed (eager and graph replay), and the rounds' order and
ratio, with planted backends, a planted timer and a planted graph capture on the CPU."""

from __future__ import annotations

import pytest
import torch

from glmcheck.bench import D_V, BenchPoint, BenchSpec, make_inputs
from glmcheck.reference import sparse_mla_reference
from tests.script_loader import load_script


@pytest.fixture(scope="module")
def script():
    return load_script("paired_timing")


@pytest.fixture(scope="module")
def inputs():
    return make_inputs(BenchPoint(1, 64, 8), topk=16, seed=3, device="cpu")


def exact(x, out):
    out.copy_(sparse_mla_reference(x.q, x.kv, x.indices, x.sm_scale, D_V, dtype=torch.float64))
    return out


def off_by_one_percent(x, out):
    return exact(x, out).mul_(1.01)


def test_pick_specs_keeps_the_pairs_order_and_names_the_argument(script):
    specs = [BenchSpec("per-token", exact), BenchSpec("union2", exact), BenchSpec("flashmla+len", exact)]
    assert [s.name for s in script.pick_specs(["flashmla+len", "per-token"], specs)] == ["flashmla+len", "per-token"]
    for bad in (["per-token", "union9"], ["per-token", "per-token"], ["per-token"]):
        with pytest.raises(ValueError, match="--pair takes two different backends"):
            script.pick_specs(bad, specs)


def test_gated_calls_time_nothing_when_one_backend_fails_its_gate(script, inputs, capsys):
    calls = script.gated_calls([BenchSpec("a", exact), BenchSpec("b", off_by_one_percent)], inputs, "eager")
    assert calls is None
    assert "b failed its gate" in capsys.readouterr().out
    calls = script.gated_calls([BenchSpec("a", exact), BenchSpec("b", exact)], inputs, "eager")
    assert list(calls) == ["a", "b"]


def test_gated_calls_gate_the_graph_replay_on_a_poisoned_output(script, inputs, capsys):
    """A replay that leaves its output unwritten must fail: the capture's output is NaN-poisoned
    before the replay, so stale correct values cannot pass."""
    def capture_writing(fn):
        output = fn().clone()
        return (lambda: exact(inputs, output)), output

    def capture_not_writing(fn):
        output = fn().clone()
        return (lambda: None), output

    calls = script.gated_calls([BenchSpec("a", exact)], inputs, "graph", capture=capture_writing)
    assert list(calls) == ["a"]
    assert script.gated_calls([BenchSpec("a", exact)], inputs, "graph", capture=capture_not_writing) is None
    assert "graph replay gate failed" in capsys.readouterr().out


def test_alternate_times_a_then_b_each_round_and_prints_the_median_ratio(script, capsys):
    order: list[str] = []
    times = iter([4.0, 2.0, 3.0, 2.0, 9.0, 2.0])

    def timer(fn, rep_ms):
        order.append(fn())
        return next(times)

    pairs = script.alternate({"a": lambda: "a", "b": lambda: "b"}, 3, timer=timer)
    assert order == ["a", "b"] * 3
    assert pairs == [(4.0, 2.0), (3.0, 2.0), (9.0, 2.0)]
    assert "median a/b over 3 rounds: 2.000 (range 1.500-4.500" in capsys.readouterr().out
