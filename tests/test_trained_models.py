"""The trained models (ref-cpu, ref-gpu) by name, natural held-out prompts, and checks that run on them."""

from __future__ import annotations

import json

import pytest
import torch

from glmcheck import cli
from glmcheck.data.heldout import heldout_documents, heldout_prompt_records, heldout_stream, natural_prompt
from glmcheck.data.model_prompts import model_prompt, prompt_source
from glmcheck.data.model_tokenizer import CheckpointTokenizer
from glmcheck.data.prompts import PROMPTS_DIR, load_prompts
from glmcheck.model.load import ModelSpec, config_of, model_names
from glmcheck.model.trained import DEFAULT_MODEL, MODELS_DIR, trained_checkpoint

REF_CPU = str(MODELS_DIR / "ref-cpu")


def test_trained_model_names_resolve_to_their_package_data():
    spec = ModelSpec("ref-cpu")
    assert spec.checkpoint == str(trained_checkpoint("ref-cpu")) and spec.trained == "ref-cpu"
    assert spec.describe()["trained"] == "ref-cpu" and spec.describe()["preset"] is None
    assert config_of(spec).index_topk == 32 and config_of(spec).vocab_size == 2048
    assert ModelSpec("tiny").checkpoint is None and ModelSpec("ref-cpu", checkpoint="/x").trained is None
    assert DEFAULT_MODEL == "ref-cpu" and model_names()[:3] == ["ref-cpu", "ref-gpu", "ref-gpu-fp8"]
    with pytest.raises(ValueError, match="unknown trained model"):
        trained_checkpoint("ref-nope")


def test_heldout50_file_matches_its_generator():
    lines = (PROMPTS_DIR / "heldout50.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == heldout_prompt_records(50)
    prompts = load_prompts("heldout50")
    names = {d.name for d in heldout_documents()}
    assert len(prompts) == 50 and {p.category for p in prompts} <= names
    texts = {d.name: d.text for d in heldout_documents()}
    for p in prompts:  # held-out text, cut at a word boundary
        assert p.prompt.split("\n")[-1].strip() and p.prompt.split("\n")[-1] in texts[p.category]


def test_natural_prompts_are_seeded_windows_of_the_heldout_stream():
    tok = CheckpointTokenizer(REF_CPU)
    stream = heldout_stream(tok)
    a, b = natural_prompt(tok, 300, 5, stream=stream), natural_prompt(tok, 300, 6, stream=stream)
    assert a.shape == (1, 300) and a[0, 0].item() == tok.bos_id and not torch.equal(a, b)
    assert torch.equal(a, natural_prompt(tok, 300, 5, stream=stream))
    text = "".join(str(x) for x in stream)  # the window (after its bos) is a slice of the stream
    assert ",".join(map(str, a[0, 1:20].tolist())) in ",".join(map(str, stream))
    assert text
    long = natural_prompt(tok, len(stream) + 10, 1, stream=stream)  # longer than the stream: it repeats
    assert long.shape[1] == len(stream) + 10
    spec = ModelSpec("ref-cpu")
    assert torch.equal(model_prompt(spec, 2048, 300, 5), a) and "held-out" in prompt_source(spec)
    assert "seeded" in prompt_source(ModelSpec("tiny"))


def test_default_model_and_firsttoken_prompts(tmp_path, capsys):
    """With no --model a check runs ref-cpu (the CPU-sized trained model); firsttoken on it reads
    heldout50 by default and reports how peaked the reference's distributions are."""
    out = tmp_path / "ft"
    code = cli.main(["firsttoken", "--limit", "3", "--band", "3", "--backends", "triton_sparse_mla", "--quiet",
                     "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["model"]["trained"] == "ref-cpu" and summary["facts"]["prompt_set"] == "heldout50"
    assert 0 < summary["facts"]["reference_median_top1_prob"] <= 1
    assert "reference distributions: median top-1 probability" in printed


@pytest.mark.slow  # ~1 minute in the interpreter; the 20-seed figures on the checkpoints are measured on the GPU
def test_rates_on_a_checkpoint_vary_the_prompt_not_the_weights(monkeypatch):
    import glmcheck.kernels  # noqa: F401  (interpreter on CPU-only machines)
    from glmcheck.selftest import rates
    from glmcheck.selftest.rates import measure_rates

    monkeypatch.setattr(rates, "FIRSTTOKEN_PROMPTS", 2)  # 9 Triton backends a prompt in the interpreter

    tallies = measure_rates(ModelSpec("ref-cpu"), [0], 24, ["firsttoken"], band_size=3)  # the fewest that judge
    by_name = {t.backend: t for t in tallies}
    assert by_name["triton_sparse_mla"].legitimate and by_name["triton_sparse_mla"].runs == 1
    assert by_name["fault:rope_dropped"].fails == 1  # a gross fault flips or moves the first tokens
    assert all(t.check == "firsttoken" for t in tallies)


@pytest.mark.parametrize("key", ["trained", "reference"])
def test_a_record_names_its_trained_model_under_either_key(key):
    """`report --md` heads a record with the trained model it ran, held as `trained` or, in records written
    before that name, as `reference`; a record of a preset names the preset."""
    from glmcheck.records.render import render
    from glmcheck.records.samples import sample_records_dir
    from glmcheck.records.store import read_record

    sample = read_record(sample_records_dir() / "layer0")
    model = {k: v for k, v in sample.summary["model"].items() if k not in ("trained", "reference")}
    model.update({"preset": "tiny", "checkpoint": None})
    assert "- model: tiny (config" in render({**sample.summary, "model": model}, sample.rows, "md")
    model.update({key: "ref-cpu", "checkpoint": REF_CPU, "preset": None})
    assert "- model: ref-cpu (config" in render({**sample.summary, "model": model}, sample.rows, "md")
