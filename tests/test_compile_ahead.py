"""Compile ahead (`glmcheck.startup.compile_ahead`, issue 55): the reference forward's recorded calls are the
backends' own inputs; every compiling backend runs once on each of them, in threads; a check's rows do not change;
on the GPU the forwards then compile nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest
import torch

from glmcheck.backends import Backend
from glmcheck.checks.runner import SwapOptions, forward_under
from glmcheck.model import build_dummy_model, make_config
from glmcheck.process.phases import PhaseClock, _time_triton_compiles
from glmcheck.startup import compile_ahead

TOKENS = 20


@pytest.fixture(scope="module")
def tiny():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return build_dummy_model(make_config("tiny"), seed=3, init="sharp").to(device)


@pytest.fixture(scope="module")
def prompt(tiny):
    ids = torch.randint(0, 512, (1, TOKENS), generator=torch.Generator().manual_seed(5))
    return ids.to(next(tiny.parameters()).device)


def test_recorded_calls_are_rank_zeros_inputs_one_per_shape(tiny, prompt, monkeypatch):
    seen = []

    def spy(self, q, kv, indices, sm_scale, d_v=512, *, topk_length=None, plan=None):
        seen.append((q, kv, indices, topk_length, sm_scale, d_v))
        return original(self, q, kv, indices, sm_scale, d_v, topk_length=topk_length, plan=plan)

    original = Backend.__call__
    monkeypatch.setattr(Backend, "__call__", spy)
    run = forward_under(tiny, prompt, "reference", SwapOptions(tp=2, topk_length=True), record_calls=True)
    heads = tiny.config.num_attention_heads
    assert len(seen) == 2 * tiny.config.num_hidden_layers  # two rank slices a layer
    assert len(run.kernel_calls) == 1, "every layer's calls have one shape on tiny"
    call = run.kernel_calls[0]
    q, kv, indices, lengths, sm_scale, d_v = seen[0]  # rank 0 of layer 0: the very tensors the backend got
    assert call.q is q and call.kv is kv and call.indices is indices and call.lengths is lengths
    assert call.q.shape[:2] == (TOKENS, heads // 2) and call.sm_scale == sm_scale and call.d_v == d_v
    assert forward_under(tiny, prompt, "reference", SwapOptions()).kernel_calls == [], "only when asked"


def test_enabled_by_device_and_environment(monkeypatch):
    monkeypatch.delenv(compile_ahead.ENV, raising=False)
    assert not compile_ahead.enabled("cpu")
    monkeypatch.setenv(compile_ahead.ENV, "1")
    assert compile_ahead.enabled("cpu")
    monkeypatch.setenv(compile_ahead.ENV, "0")
    assert not compile_ahead.enabled("cuda")


def test_compiling_backends_are_glmchecks_own_triton_ones():
    from glmcheck.backends import register_backend, unregister_backend
    from glmcheck.backends.reference import sparse_mla_reference

    register_backend("triton_sparse_mla_mine", sparse_mla_reference)
    try:
        names = ["reference", "band:0", "hf_sdpa", "triton_sparse_mla", "flashmla_sparse", "triton_sparse_mla:union4",
                 "triton_sparse_mla_mine", "band:0"]
        assert compile_ahead.compiling(names) == ["band:0", "triton_sparse_mla", "triton_sparse_mla:union4"]
    finally:
        unregister_backend("triton_sparse_mla_mine")


def test_each_backend_runs_once_on_every_call_in_threads(tiny, prompt, monkeypatch):
    calls = forward_under(tiny, prompt, "reference", SwapOptions(tp=2), record_calls=True).kernel_calls
    calls = calls + [calls[0]]  # two calls: each backend must see both
    ran: dict[str, list] = {}
    lock = threading.Lock()

    def fake_backend(name, *, deterministic=False, kv_cache_dtype=None):
        def fn(q, kv, indices, sm_scale, d_v=512, *, topk_length=None, plan=None):
            with lock:
                ran.setdefault(name, []).append((threading.current_thread().name, q, plan, deterministic))
            if name == "band:1":
                raise RuntimeError("left to its own forward")
            return q[..., :d_v]
        return Backend(name, fn, "", planner=(lambda indices, **kw: ("plan", indices)) if "union" in name else None)

    monkeypatch.setattr(compile_ahead, "get_backend", fake_backend)
    names = ["band:0", "band:1", "triton_sparse_mla:union2", "reference"]
    done = compile_ahead.compile_ahead(calls, names, deterministic=True, threads=2)
    assert done == ["band:0", "band:1", "triton_sparse_mla:union2"], "the reference is not run"
    # band:1 raised on its first call: the rest is its own forward's to report
    assert {name: len(seen) for name, seen in ran.items()} == {"band:0": 2, "band:1": 1, "triton_sparse_mla:union2": 2}
    assert all(thread.startswith("glmcheck-compile") for seen in ran.values() for thread, *_ in seen)
    assert all(seen[i][1] is calls[i].q and seen[i][3] for seen in ran.values() for i in range(len(seen)))
    assert ran["triton_sparse_mla:union2"][0][2] == ("plan", calls[0].indices), "planned as the session plans"
    assert compile_ahead.compile_ahead([], names) == [] and compile_ahead.compile_ahead(calls, ["reference"]) == []
    with pytest.raises(ValueError, match="threads"):
        compile_ahead.compile_ahead(calls, names, threads=0)


def test_layer0_rows_are_the_same_with_and_without(tiny, prompt, monkeypatch):
    from glmcheck.checks.layer0 import run_layer0

    def rows():
        result = run_layer0(tiny, prompt, ["triton_sparse_mla:union2"], options=SwapOptions(tp=2), band_size=3)
        return [(r.comparison, r.verdict, r.rel_l2, r.max_abs, r.cosine, r.extra) for r in result.rows]

    monkeypatch.setenv(compile_ahead.ENV, "0")
    without = rows()
    ran = []
    monkeypatch.setattr(compile_ahead, "run_each", lambda name, calls, **kw: ran.append((name, len(calls))))
    monkeypatch.setenv(compile_ahead.ENV, "1")
    assert rows() == without
    assert ran == [("band:0", 1), ("band:1", 1), ("band:2", 1), ("triton_sparse_mla:union2", 1)]


def test_the_profile_counts_the_main_threads_compiles_only():
    pytest.importorskip("triton")
    from triton import knobs

    clock = PhaseClock()
    restore = _time_triton_compiles(clock)
    if restore is None:
        pytest.skip("this Triton has no JIT hooks")
    try:
        def compile_once():
            knobs.runtime.jit_cache_hook()
            knobs.runtime.jit_post_compile_hook(fn=None)

        worker = threading.Thread(target=compile_once)
        worker.start()
        worker.join()
        assert clock.compiled["kernel"] == 1 and "compile" not in clock.seconds, "a worker's compile: counted only"
        compile_once()
        assert clock.compiled["kernel"] == 2 and clock.seconds["compile"] >= 0
        clock.seconds.pop("compile")
        with clock.phase("compile ahead"):
            compile_once()
        assert "compile" not in clock.seconds, "inside compile ahead its wall time counts, not the compile's"
    finally:
        restore()


_GPU_RUN = """
import json, sys
from glmcheck.process.phases import CLOCK
from glmcheck.checks.layer0 import run_layer0
from glmcheck.checks.runner import SwapOptions
from glmcheck.model import build_dummy_model, make_config
import torch
CLOCK.begin(); CLOCK.enable()
model = build_dummy_model(make_config("tiny"), seed=3, init="sharp").cuda()
ids = torch.randint(0, 512, (1, 300), generator=torch.Generator().manual_seed(5)).cuda()
result = run_layer0(model, ids, ["triton_sparse_mla", "triton_sparse_mla:union4"], options=SwapOptions(tp=2))
json.dump({"rows": [[r.comparison, r.verdict, r.rel_l2, r.max_abs, r.cosine] for r in result.rows],
           "compile": CLOCK.seconds.get("compile", 0.0), "variants": sum(CLOCK.compiled.values())}, sys.stdout)
"""


@pytest.mark.gpu
def test_on_the_gpu_the_forwards_compile_nothing_after_it(tmp_path):
    out = {}
    for ahead in ("0", "1"):
        env = {**os.environ, compile_ahead.ENV: ahead, "TRITON_CACHE_DIR": str(tmp_path / f"cache{ahead}")}
        done = subprocess.run([sys.executable, "-c", _GPU_RUN], check=False, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        out[ahead] = json.loads(done.stdout)
    assert out["0"]["rows"] == out["1"]["rows"], "the same rows, bit for bit"
    assert out["0"]["compile"] > 0 and out["0"]["variants"] > 0, "cold: the forwards compiled"
    assert out["1"]["compile"] == 0 and out["1"]["variants"] >= out["0"]["variants"], "all of it ahead"


def test_firsttoken_compiles_ahead_once_for_every_prompt_shape(monkeypatch):
    from glmcheck.evaluate import CheckOptions, firsttoken

    def rows():
        report = firsttoken(CheckOptions(model="tiny", backends=["triton_sparse_mla:union2"], band=3, quiet=True),
                            limit=3)
        return report.verdict, report.rows

    monkeypatch.setenv(compile_ahead.ENV, "0")
    without = rows()
    ran = []
    monkeypatch.setattr(compile_ahead, "run_each",
                        lambda name, calls, **kw: ran.append((name, sorted(c.q.shape[0] for c in calls))))
    monkeypatch.setenv(compile_ahead.ENV, "1")
    assert rows() == without
    lengths = ran[0][1]
    assert len(lengths) == len(set(lengths)) >= 2, "one call per prompt shape, every prompt's"
    assert ran == [(name, lengths) for name in ("band:0", "band:1", "band:2", "triton_sparse_mla:union2")], \
        "each backend once, over all the prompts' calls"


def test_a_call_set_keeps_one_call_a_shape_within_its_budget(tiny, prompt):
    first = forward_under(tiny, prompt, "reference", SwapOptions(tp=2), record_calls=True).kernel_calls
    other = forward_under(tiny, prompt[:, :9], "reference", SwapOptions(tp=2), record_calls=True).kernel_calls
    size = sum(t.numel() * t.element_size() for t in (first[0].q, first[0].kv, first[0].indices))
    kept = compile_ahead.CallSet()
    kept.add(first + first + other)
    assert kept.calls() == [first[0], other[0]], "one a shape"
    tight = compile_ahead.CallSet(budget=size)
    tight.add(first + other)
    assert tight.calls() == [first[0]] and tight.used == size, "past the budget a shape compiles in its forward"
