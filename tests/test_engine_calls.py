"""`--calls serving` at model level (glmcheck.model.engine_calls): every check calls its backends as an engine's extend
does; the exact reference's outputs equal its one-shot outputs bit for bit; the kernel under test's per-token path
equals its own one-shot outputs in the interpreter; shape-only faults FAIL with serving and PASS without; records
say which shape ran, and a prefill record is unchanged."""

from __future__ import annotations

import pytest
import torch

from glmcheck import cli
from glmcheck.checks.band import FAIL, PASS
from glmcheck.checks.runner import SwapOptions, forward_under
from glmcheck.data.model_prompts import model_prompt
from glmcheck.evaluate import CheckOptions, drift, firsttoken, layer0, logits, sweep
from glmcheck.model.engine_calls import EngineCalls
from glmcheck.model.engine_shape import EngineShape
from glmcheck.model.load import ModelSpec, load_model
from glmcheck.records.render import render
from glmcheck.selftest.shape_faults import SHAPE_FAULTS, register_shape_faults

SPEC = ModelSpec(preset="ref-cpu")


@pytest.fixture(scope="module")
def ref_cpu():
    model = load_model(SPEC, torch.device("cpu"))
    return model, model_prompt(SPEC, model.config.vocab_size, 128, 0, torch.device("cpu"))


@pytest.mark.parametrize("name, kv_cache_dtype, shape", [
    ("reference", None, EngineShape()),
    ("reference:fp64", "fp8_e4m3", EngineShape(chunk=40, requests=3, seed=5)),
    ("band:0", None, EngineShape(chunk=100, pool_rows=1024, requests=1)),
])
def test_the_exact_reference_equals_its_one_shot_forward_bit_for_bit(ref_cpu, name, kv_cache_dtype, shape):
    """Every layer's attention output and the logits at every position, on ref-cpu's three layers (full, shared and
    full indexer); the band's kernels too (flash-style, per token)."""
    model, ids = ref_cpu
    layers = list(range(model.config.num_hidden_layers))
    one_shot = forward_under(model, ids, name, SwapOptions(kv_cache_dtype=kv_cache_dtype), latent_layers=layers,
                             last_logits=ids.shape[1])
    engine = EngineCalls(shape)
    served = forward_under(model, ids, name, SwapOptions(kv_cache_dtype=kv_cache_dtype, engine=engine),
                           latent_layers=layers, last_logits=ids.shape[1])
    for layer in layers:
        assert torch.equal(served.captured.latent[layer], one_shot.captured.latent[layer]), f"layer {layer}"
    assert torch.equal(served.captured.logits, one_shot.captured.logits)
    tally = engine.tally[name]
    assert tally.layers == tally.equal == len(layers) and tally.engine_calls > len(layers)
    assert served.plan_builds == one_shot.plan_builds or name != "reference"


def test_prefill_calls_are_todays_one_shot_calls(ref_cpu):
    """--calls prefill (the default) hands each backend exactly the one-shot call: the prompt's T rows, indices into
    them, no topk_length; --calls serving records the engine's (the pool, topk_length) beside it."""
    model, ids = ref_cpu
    calls = forward_under(model, ids, "reference", SwapOptions(), record_calls=True).kernel_calls
    assert [(tuple(c.q.shape[:1]), c.kv.shape[0], c.lengths) for c in calls] == [((128,), 128, None)]
    served = forward_under(model, ids, "reference", SwapOptions(engine=EngineCalls(EngineShape())),
                           record_calls=True).kernel_calls
    assert {c.kv.shape[0] for c in served} == {128, 4096} and any(c.lengths is not None for c in served)


def test_the_per_token_path_equals_its_one_shot_output_in_the_interpreter():
    """The kernel under test, in Triton's interpreter (compared on request: by default the interpreter's rows are
    not called twice): the per-token path gives its one-shot outputs bit for bit (docs/kernel.md, "Engine-shaped
    calls", where the union paths' differences are measured)."""
    model = load_model(SPEC, torch.device("cpu"), layer0_only=True)
    ids = model_prompt(SPEC, model.config.vocab_size, 64, 1, torch.device("cpu"))
    engine = EngineCalls(EngineShape(chunk=24, compare=True))
    forward_under(model, ids, "triton_sparse_mla", SwapOptions(engine=engine), latent_layers=[0])
    per_token = engine.tally["triton_sparse_mla"]
    assert per_token.layers == per_token.equal == 1 and per_token.engine_calls == 3
    assert not EngineCalls(EngineShape()).compares("triton_sparse_mla"), "not called twice in the interpreter"
    assert EngineCalls(EngineShape()).compares("band:3") and EngineCalls(EngineShape()).compares("reference@tempered")


def test_shape_only_faults_fail_with_serving_and_pass_with_prefill():
    """layer0 on ref-cpu (the README's default model): each shape-only fault FAILs on the engine's calls and PASSes
    on one-shot ones; the kernel under test PASSes both."""
    names = register_shape_faults()
    backends = [*names, "triton_sparse_mla"]
    for calls, faulty in (("prefill", PASS), ("serving", FAIL)):
        report = layer0(CheckOptions(backends=backends, calls=calls, baseline="none", quiet=True), tokens=64)
        verdicts = {r["backend"]: r["verdict"] for r in report.rows if not r["comparison"].startswith("noise")}
        assert verdicts == {**dict.fromkeys(SHAPE_FAULTS, faulty), "triton_sparse_mla": PASS}, calls


def test_every_check_takes_the_calls_and_records_the_shape(tmp_path):
    """logits, drift, sweep and firsttoken run engine-shaped calls and say so in their record and tables; layer0's
    prefill record holds no trace of them (its rows and facts as before)."""
    options = {"backends": ["reference:bf16"], "band": 3, "baseline": "none", "quiet": True}
    serving = CheckOptions(calls="serving", chunk=20, requests=3, **options)
    reports = [logits(serving, tokens=[48]), drift(serving, tokens=40), sweep(serving, tokens=(32, 64)),
               firsttoken(serving, limit=1)]
    for report in reports:
        facts = report.facts["engine_calls"]
        assert report.options["calls"] == {"calls": "serving", "chunk": 20, "pool_rows": None, "requests": 3,
                                           "compare": None}
        assert facts["ran"] and all(r["chunk"] == 20 and r["pool_rows"] == 4096 for r in facts["ran"])
        assert facts["backends"]["reference:bf16"]["equal"] == facts["backends"]["reference:bf16"]["layers"] > 0
        assert "engine-shaped calls (--calls serving)" in report.render()
    prefill = layer0(CheckOptions(**options), tokens=32)
    assert "calls" not in prefill.options and "engine_calls" not in prefill.facts
    assert "engine-shaped" not in render(prefill.summary(), prefill.frame())


@pytest.mark.parametrize("argv, message", [
    (["layer0", "--chunk", "64"], "--chunk shape the engine's calls: give them with --calls serving"),
    (["layer0", "--calls", "serving", "--pool-rows", "100"], "--pool-rows must be a multiple of 64"),
    (["layer0", "--calls", "serving", "--pool-rows", "64", "--tokens", "128"], "--pool-rows 64: .* need at least"),
    (["layer0", "--calls", "serving", "--pool-rows", str(2**31 - 64), "--model", "tiny", "--tokens", "32"],
     r"--tokens 32: .* GiB \(weights, activations and the --calls serving pool, `glmcheck plan`\), more than"),
    (["plan", "--calls", "serving", "--pool-rows", "100"], "--pool-rows must be a multiple of 64"),
    (["plan", "--calls", "serving", "--pool-rows", "64"], "--pool-rows 64: the prompt's pages .* need at least 8256"),
    (["plan", "--pool-rows", "4096"], "--pool-rows shape the engine's calls: give them with --calls serving"),
    (["plan", "--kv-cache-dtype", "fp8_e4m3"], "--kv-cache-dtype fp8_e4m3 sizes the pool of --calls serving"),
    (["selftest", "--calls", "serving"], "--calls applies to the verdict-rates run only"),
    (["selftest", "--model", "ref-cpu", "--power", "--calls", "serving"], "--calls applies to the verdict rates"),
])
def test_bad_engine_options_are_one_line_and_exit_2(argv, message, capsys, tmp_path):
    assert cli.main([*argv, "--out", str(tmp_path / "run")] if argv[0] == "layer0" else argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and pytest.importorskip("re").search(message, err), err
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # ~1 minute; the 20-seed figures (docs/reliability.md, "Engine-shaped calls") are its full run
def test_the_shape_fault_rates_script(capsys):
    """scripts/shape_fault_rates.py over 2 seeds: every shape-only fault missed one-shot, caught engine-shaped."""
    from tests.support.script_loader import load_script

    assert load_script("shape_fault_rates").main(["--seeds", "2", "--checks", "layer0"]) == 0
    prefill, serving = capsys.readouterr().out.split("--calls serving")
    for name in SHAPE_FAULTS:
        assert f"| {name} " in prefill and "2/2 misses" in prefill.split(f"| {name} ")[1].splitlines()[0]
        assert "0/2 misses" in serving.split(f"| {name} ")[1].splitlines()[0]


def test_the_serving_rates_run_the_shape_faults_in_place_of_the_late_one(monkeypatch):
    """measure_rates with engine-shaped calls: the shape-only faults join the planted ones, the late fault (placed by
    the row in the call, which the default chunks never reach) leaves; every forward gets its seed's layout."""
    import types

    from glmcheck.selftest import rates

    seen = []

    def fake_layer0(net, ids, backends, options, **kw):
        seen.append((backends, options.engine.shape.seed))
        return types.SimpleNamespace(rows=[], verdict=PASS)

    net = types.SimpleNamespace(config=types.SimpleNamespace(num_attention_heads=8, vocab_size=512))
    monkeypatch.setattr(rates, "load_model", lambda *a, **k: net)
    monkeypatch.setattr(rates, "run_layer0", fake_layer0)
    rates.measure_rates("tiny", [3, 4], 64, ["layer0"], engine=EngineShape())
    assert [seed for _, seed in seen] == [3, 4]
    backends = seen[0][0]
    assert set(SHAPE_FAULTS) <= set(backends) and not any(b.startswith("fault:quarter_dropped") for b in backends)
