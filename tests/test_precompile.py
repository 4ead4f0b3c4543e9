"""The precompile child (`glmcheck.startup.precompile`, its spec from a command line `glmcheck.cli.precompile_spec`;
issue 55): the calls it predicts from a command line are the
attention swap's own (shapes, strides, dtypes), its picks are causal; when it starts; the child's lifecycle; and on
the GPU a check after it compiles none of the variants it compiled."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from glmcheck.backends import forms
from glmcheck.checks.runner import forward_under
from glmcheck.cli import build_parser, precompile_spec, start_precompile
from glmcheck.data.model_prompts import model_prompt
from glmcheck.evaluate.options import CheckOptions
from glmcheck.evaluate.setup import Setup
from glmcheck.model.load import load_model
from glmcheck.startup import child, compile_ahead, precompile
from glmcheck.startup.prediction import PrecompileSpec, causal_picks, predicted_calls, prompt_lengths


def _ns(*argv: str):
    return build_parser(list(argv)).parse_args(list(argv))


def _spec(*argv: str) -> PrecompileSpec:
    return precompile_spec(_ns(*argv))


@pytest.mark.parametrize("model,tp,tokens", [("tiny", 2, 100), ("tiny", 1, 20), ("ref-cpu", 1, 300)])
def test_predicted_calls_are_the_swaps_own(model, tp, tokens):
    setup = Setup(CheckOptions(model=model, tp=tp, quiet=True), one_prompt=True, tokens=tokens)
    built = load_model(setup.spec, setup.device)
    ids = model_prompt(setup.spec, built.config.vocab_size, tokens, 0, setup.device)
    recorded = forward_under(built, ids, setup.exact, setup.options, record_calls=True).kernel_calls
    predicted = predicted_calls(_spec("layer0", "--model", model, "--tp", str(tp), "--tokens", str(tokens)), "cpu")
    assert len(recorded) == len(predicted) == 1
    mine, theirs = predicted[0], recorded[0]
    assert mine.key() == theirs.key()
    for name in ("q", "kv", "indices"):
        assert getattr(mine, name).stride() == getattr(theirs, name).stride(), name
        assert getattr(mine, name).dtype == getattr(theirs, name).dtype, name
    assert mine.lengths is None and theirs.lengths is None


def test_predicted_calls_keep_within_their_budget():
    spec = _spec("logits", "--model", "ref-cpu", "--tokens", "64,128")
    assert [c.q.shape[0] for c in predicted_calls(spec, "cpu")] == [64, 128]
    one = 128 * (8 * 80 * 2 + 80 * 2 + 32 * 4)  # q, kv and indices of the 128-token call
    assert [c.q.shape[0] for c in predicted_calls(spec, "cpu", budget=one - 1)] == [64]


def test_causal_picks_are_each_tokens_own_positions():
    picks = causal_picks(50, 16, "cpu")
    assert picks.shape == (50, 16) and picks.dtype == torch.int32
    for t in range(50):
        row = picks[t].tolist()
        valid = [p for p in row if p >= 0]
        assert len(valid) == min(16, t + 1) and len(set(valid)) == len(valid) and max(valid) <= t
        assert row[len(valid):] == [-1] * (16 - len(valid)), "the empty slots come last"
    shared = [len(set(picks[t].tolist()) & set(picks[t + 1].tolist())) for t in range(20, 49)]
    assert min(shared) >= 12, "neighbours share most picks, as the indexer's do"
    assert causal_picks(8, 32, "cpu").shape == (8, 8), "fewer positions than top-k: one slot each"


def test_the_spec_comes_from_the_command_line_without_the_model_code(tmp_path):
    spec = _spec("layer0", "--model", "glm-5.2", "--tp", "8")
    assert (spec.heads, spec.tp, spec.latent_dim, spec.rope_dim, spec.index_topk, spec.tokens) == \
        (64, 8, 512, 64, 2048, (4096,))
    assert spec.band == 4 and spec.exact == "fp32" and spec.backends is None
    assert _spec("sweep", "--model", "ref-gpu").tokens == (32768,) and _spec("sweep", "--model", "ref-gpu").band == 8
    assert _spec("sweep", "--tokens", "100..400", "--band", "3").tokens == (400,)
    assert _spec("logits", "--tokens", "64,128", "--backends", "triton_sparse_mla").backends == "triton_sparse_mla"
    assert _spec("logits").tokens == (2048, 4096, 8192) and _spec("drift", "--tokens", "77").tokens == (77,)
    for argv in (("layer0", "--text", "hello"), ("sweep", "--endpoint", "http://localhost:1"),
                 ("logits", "--endpoint", "http://localhost:1")):
        ns = _ns(*argv)
        assert ns.precompile_tokens(ns) is None, argv
    ns = _ns("firsttoken", "--endpoint", "http://localhost:1")
    assert ns.precompile_tokens(ns) is None
    config = {"num_attention_heads": 16, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "index_topk": 1024}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert _spec("layer0", "--checkpoint", str(tmp_path), "--tokens", "10").heads == 16
    (tmp_path / "config.json").write_text("{not json")
    assert _spec("layer0", "--checkpoint", str(tmp_path), "--tokens", "10") is None
    assert _spec("layer0", "--checkpoint", str(tmp_path / "missing"), "--tokens", "10") is None
    assert PrecompileSpec.from_json(spec.to_json()) == spec
    assert (spec.band_impl, spec.reference_impl) == (None, None), "the environment's forms, which the child inherits"
    forms_given = _spec("layer0", "--band-impl", "torch", "--reference-impl", "triton")
    assert (forms_given.band_impl, forms_given.reference_impl) == ("torch", "triton")


def test_firsttokens_lengths_are_its_prompts_own(monkeypatch, tmp_path):
    from glmcheck.data.model_tokenizer import CheckpointTokenizer
    from glmcheck.data.prompts import load_prompts
    from glmcheck.evaluate import firsttoken
    from glmcheck.model.trained import MODELS_DIR

    spec = _spec("firsttoken", "--model", "ref-cpu", "--limit", "6", "--continue", "2")
    assert (spec.prompts, spec.limit, spec.continue_tokens, spec.tokens) == ("heldout50", 6, 2, ())
    tokenizer = CheckpointTokenizer(str(MODELS_DIR / "ref-cpu"))
    counts = [len(tokenizer.encode(p.prompt)) for p in load_prompts("heldout50", 6)]
    assert prompt_lengths(spec) == sorted({n + i for n in counts for i in range(3)})
    assert _spec("firsttoken", "--model", "tiny").prompts == "natural50" and _spec("firsttoken").tokenizer is not None
    (tmp_path / "config.json").write_text(json.dumps({"num_attention_heads": 8, "kv_lora_rank": 64,
                                                      "qk_rope_head_dim": 16, "index_topk": 32, "vocab_size": 512}))
    assert _spec("firsttoken", "--checkpoint", str(tmp_path)) is None, "no tokenizer.json"
    # the lengths of the calls the check's own compile ahead sees
    seen = []
    monkeypatch.setattr(compile_ahead, "run_each",
                        lambda name, calls, **kw: seen.append(sorted(c.q.shape[0] for c in calls)))
    monkeypatch.setenv(compile_ahead.ENV, "1")
    firsttoken(CheckOptions(model="tiny", backends=["triton_sparse_mla:union2"], band=2, quiet=True), limit=4)
    assert seen[0] == prompt_lengths(_spec("firsttoken", "--model", "tiny", "--limit", "4"))


def test_it_starts_only_where_it_can_help(monkeypatch):
    for name in (precompile.ENV, compile_ahead.ENV, "TRITON_INTERPRET", "WORLD_SIZE", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(precompile.glob, "glob", lambda pattern: ["/dev/nvidia0"])
    assert precompile.wanted() and precompile.wanted("cuda:1")
    assert not precompile.wanted("cpu")
    for name, value in ((precompile.ENV, "0"), (compile_ahead.ENV, "off"), ("TRITON_INTERPRET", "1"),
                        ("WORLD_SIZE", "8"), ("CUDA_VISIBLE_DEVICES", "")):
        with monkeypatch.context() as scoped:
            scoped.setenv(name, value)
            assert not precompile.wanted(), name
    monkeypatch.setattr(precompile.glob, "glob", lambda pattern: [])
    assert not precompile.wanted(), "no device node: the child would only import torch"
    monkeypatch.setenv(precompile.ENV, "1")
    assert precompile.wanted()
    started = []
    monkeypatch.setattr(precompile, "start", lambda spec: started.append(spec) or True)
    assert start_precompile(_ns("layer0", "--model", "glm-5.2")) and started[0].tokens == (4096,)
    assert start_precompile(_ns("firsttoken", "--model", "ref-gpu"))
    assert started[1].tokens == () and started[1].prompts == "heldout50" and started[1].tokenizer.endswith("ref-gpu")
    assert not start_precompile(_ns("layer0", "--text", "x"))
    assert start_precompile(_ns("layer0", "--text", "x", "--tokens", "300")) and started[2].tokens == (300,)
    assert not start_precompile(_ns("layer0", "--device", "cpu"))
    assert not start_precompile(_ns("report", "x")), "no model check: no prompt lengths"
    assert len(started) == 3


def test_the_child_compiles_ahead_the_bands_and_kernels_on_the_predicted_calls(monkeypatch):
    ran, warmed = [], []
    monkeypatch.setattr(compile_ahead, "run_each", lambda name, calls, **kw: ran.append(
        (name, [tuple(c.q.shape) for c in calls], kw | {"forms": forms.active()})))
    monkeypatch.setattr(precompile, "warm_sdpa", lambda spec, device: warmed.append(spec.tokens))
    spec = PrecompileSpec(8, 2, 64, 16, 32, (40, 24), "triton_sparse_mla:union2,hf_sdpa", 3, "fp32", None, True, None,
                          "cpu")
    assert precompile.run(spec) == ["band:0", "band:1", "band:2", "triton_sparse_mla:union2"]
    assert [name for name, *_ in ran] == ["band:0", "band:1", "band:2", "triton_sparse_mla:union2"]
    assert all(shapes == [(24, 4, 80), (40, 4, 80)] and kw["deterministic"] for _, shapes, kw in ran)
    assert all(kw["forms"] == forms.Forms(forms.band_default(), forms.reference_default()) for *_, kw in ran)
    assert warmed == [(40, 24)], "hf_sdpa is a row: its SDPA kernels are warmed, once"
    precompile.run(PrecompileSpec(8, 2, 64, 16, 32, (40,), "triton_sparse_mla", 1, "fp32", None, False, None, "cpu"))
    assert warmed == [(40, 24)], "no hf_sdpa row: nothing warmed"
    precompile.run(PrecompileSpec(8, 2, 64, 16, 32, (40,), "triton_sparse_mla", 1, "fp32", None, False, None, "cpu",
                                  band_impl="triton", reference_impl="triton"))
    assert ran[-1][2]["forms"] == forms.Forms("triton", "triton"), "the check's forms, as the spec names them"


def test_sdpa_is_warmed_at_each_length_of_the_models_head_dims():
    spec = _spec("layer0", "--model", "ref-gpu")
    assert (spec.qk_head_dim, spec.v_head_dim) == (128, 96)
    assert (_spec("layer0", "--model", "glm-5.2").qk_head_dim, _spec("layer0", "--model", "glm-5.2").v_head_dim) == \
        (256, 256)
    spec = PrecompileSpec(8, 1, 64, 16, 32, (12, 30, precompile.SDPA_MAX_TOKENS + 1), None, 1, "fp32", None,
                          False, None, "cpu", qk_head_dim=48, v_head_dim=32)
    assert precompile.warm_sdpa(spec, "cpu") == 2, "past SDPA_MAX_TOKENS: not warmed"
    assert precompile.warm_sdpa(PrecompileSpec(8, 1, 64, 16, 32, (12,), None, 1, "fp32", None, False, None, "cpu"),
                                "cpu") == 0, "head dims unknown: nothing"


def test_the_childs_lifecycle(monkeypatch):
    spec = PrecompileSpec(8, 2, 64, 16, 32, (12,), "triton_sparse_mla", 1, "fp32", None, False, None, "cpu")
    monkeypatch.setattr(child, "_child", None)
    assert precompile.start(spec)
    assert not precompile.start(spec), "one child per process"
    assert child.wait() == 0 and child.wait() is None
    assert precompile.start(spec)
    assert child.wait(timeout=0.001) is None, "past the wait it is stopped"
    assert child._child is None
    bad = subprocess.run([sys.executable, "-m", precompile.__name__], check=False, capture_output=True, text=True)
    assert bad.returncode == 2 and "usage" in bad.stderr


_PARENT = """
import json, sys, torch
from glmcheck.checks.layer0 import run_layer0
from glmcheck.checks.runner import SwapOptions
from glmcheck.model import build_dummy_model, make_config
model = build_dummy_model(make_config("tiny"), seed=3, init="sharp").cuda()
ids = torch.randint(0, 512, (1, 300), generator=torch.Generator().manual_seed(5)).cuda()
run_layer0(model, ids, ["triton_sparse_mla", "triton_sparse_mla:union4"], options=SwapOptions(tp=2))
"""


def _kernels(cache: Path) -> dict[str, int]:
    """Compiled variants in a Triton cache directory, by kernel name."""
    counts: dict[str, int] = {}
    for meta in cache.glob("*/*.json"):
        if not meta.name.startswith("__grp__"):
            counts[meta.stem] = counts.get(meta.stem, 0) + 1
    return counts


@pytest.mark.gpu
def test_on_the_gpu_a_check_after_the_child_compiles_none_of_its_variants(tmp_path):
    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path), compile_ahead.ENV: "1", precompile.ENV: "0"}
    spec = PrecompileSpec(8, 2, 64, 16, 32, (300,), "triton_sparse_mla,triton_sparse_mla:union4", 4, "fp32", None,
                          False, None, None)
    done = subprocess.run([sys.executable, "-m", precompile.__name__, spec.to_json()], env=env, check=False,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    before = _kernels(tmp_path)
    assert before, "the child compiled"
    parent = subprocess.run([sys.executable, "-c", _PARENT], env=env, check=False, capture_output=True, text=True,
                            timeout=600)
    assert parent.returncode == 0, parent.stderr[-2000:]
    after = _kernels(tmp_path)
    again = {name: after[name] - before[name] for name in before if after.get(name, 0) > before[name]}
    assert not again, f"the check compiled variants the child's prediction missed: {again}"
