"""The trained models' recipe: corpus, indexer scores and KL, a short training run, resume, fixtures."""

from __future__ import annotations

import gzip
import json
import math

import pytest
import torch

from glmcheck.data import documents
from glmcheck.data.heldout import HELDOUT_FILE
from glmcheck.model.indexer_scores import index_scores
from glmcheck.model.trained import MODELS_DIR, TRAINED_MODELS
from glmcheck.training import corpus
from glmcheck.training.export import check_loss, check_windows, read_record
from glmcheck.training.geometry import TRAINED_GEOMETRIES, trained_geometry
from glmcheck.training.indexer_loss import IndexerProbe, dense_selection
from glmcheck.training.loop import build_model, learning_rate
from glmcheck.training.recipe import train_model
from glmcheck.training.tokenizer import load_tokenizer


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory):
    """A corpus file of a few held-out and training documents of the committed held-out split and
    made-up text (the full stdlib corpus takes seconds to tokenise)."""
    docs = documents.load_documents(HELDOUT_FILE)
    words = " ".join(d.text for d in docs[:6])
    train = [documents.Document(f"lib/fake{i}.py", words[i * 4000:(i + 1) * 4000]) for i in range(40)]
    train = [d for d in train if not d.heldout]
    held = [d for d in docs if d.heldout][:4]
    path = tmp_path_factory.mktemp("corpus") / "small.jsonl.gz"
    documents.save_documents(held + train, path)
    return path


def test_corpus_split_and_hash_are_functions_of_the_documents(tmp_path):
    docs = [documents.Document(f"lib/m{i}.py", f"text {i}\n") for i in range(200)]
    train, held = corpus.split(docs)
    assert 0 < len(held) < 20 and len(train) + len(held) == 200
    assert corpus.split(list(reversed(docs)))[1] == list(reversed(held))  # membership does not depend on order
    assert corpus.corpus_hash(docs) == corpus.corpus_hash(list(docs))
    assert corpus.corpus_hash(docs) != corpus.corpus_hash(docs[:-1] + [documents.Document("lib/m199.py", "other")])
    documents.save_documents(docs, tmp_path / "c.jsonl.gz")
    assert documents.load_documents(tmp_path / "c.jsonl.gz") == docs
    (tmp_path / "bad.jsonl.gz").write_bytes(gzip.compress(b'{"name": 3}\n'))
    with pytest.raises(ValueError, match="malformed"):
        documents.load_documents(tmp_path / "bad.jsonl.gz")


def test_stdlib_corpus_has_topics_and_sources_and_no_tests():
    docs = corpus.stdlib_documents()
    names = [d.name for d in docs]
    assert any(n.startswith("topic/") for n in names) and "lib/json/decoder.py" in names
    assert not any("/test/" in n or "/tests/" in n for n in names)
    assert names == sorted(names[:sum(n.startswith("topic/") for n in names)]) + sorted(
        n for n in names if n.startswith("lib/"))


def _model_and_probe(seq: int = 80):
    model = build_model(trained_geometry("ref-cpu"), 600, 0, torch.device("cpu"))
    probe = IndexerProbe(model)
    model(input_ids=torch.randint(3, 600, (2, seq), generator=torch.Generator().manual_seed(1)))
    return model, probe


def test_index_scores_reproduce_the_indexers_own_topk():
    model, probe = _model_and_probe()
    for group in probe.groups:
        indexer = model.model.layers[group.full_layer].self_attn.indexer
        scores = index_scores(indexer, *group.inputs)
        causal = torch.ones(80, 80, dtype=torch.bool).tril()
        mine = scores.masked_fill(~causal, float("-inf")).topk(indexer.index_topk, dim=-1).indices
        assert torch.equal(mine.sort(-1).values, group.topk.long().sort(-1).values)
        chunk = index_scores(indexer, *group.inputs, queries=slice(17, 61, 3))
        assert torch.allclose(chunk, scores[:, 17:61:3], atol=1e-6)
    assert [g.consumers for g in probe.groups] == [[0, 1], [2]]  # full, shared, full


def test_indexer_loss_trains_the_indexer_alone_and_strides_are_unbiased():
    model, probe = _model_and_probe()
    group = probe.groups[0]
    loss = probe.loss(group, sparse=True)
    assert loss.item() > 0
    loss.backward()
    trained = {n for n, p in model.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    assert trained and all(".indexer." in n for n in trained)
    assert "model.layers.0.self_attn.indexer.wq_b.weight" in trained
    parts = [probe.loss(group, sparse=True, stride=4, offset=k).item() for k in range(4)]
    # every offset has 20 of the 80 rows: the mean of the four estimates is the full loss
    assert sum(parts) / 4 == pytest.approx(loss.item(), rel=1e-5)


def test_dense_selection_restores_topk_and_recall_is_a_share():
    model, probe = _model_and_probe(64)
    with dense_selection(model):
        probe.clear()
        model(input_ids=torch.randint(3, 600, (1, 64)))
        assert probe.groups[0].topk.shape[-1] == 64
    assert model.model.layers[0].self_attn.indexer.index_topk == 32
    result = probe.recall(probe.groups[0], 32)
    assert 0 < result["indexer"] <= 1 + 1e-6 and result["tokens"] == 32
    assert result["chance"] == pytest.approx(sum(32 / (t + 1) for t in range(32, 64)) / 32)


def test_learning_rate_warms_up_and_decays_to_a_tenth():
    recipe = trained_geometry("ref-cpu").recipe
    total = recipe.dense_steps + recipe.sparse_steps
    assert learning_rate(recipe, 0) < learning_rate(recipe, recipe.warmup_steps) == pytest.approx(recipe.lr)
    assert learning_rate(recipe, total) == pytest.approx(recipe.lr / 10)


def _short_run(out, corpus_file, steps, resume=True):
    return train_model("ref-cpu", out, corpus=corpus_file, steps=steps, resume=resume, quiet=True,
                                 overrides=dict(seq_len=64, batch=4, eval_windows=2, eval_every=4, check_len=48,
                                                check_windows=2, lr=3e-3, warmup_steps=2))


def test_a_short_run_learns_and_resumes_exactly(tmp_path, small_corpus):
    """A few steps on the CPU: the loss falls, the checkpoint loads and its check loss is recomputed;
    a run stopped after 4 steps and resumed reads the same windows as one that never stopped."""
    record = _short_run(tmp_path / "full", small_corpus, (4, 8))
    losses = [row["lm_loss"] for row in record["history"]]
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.3
    assert all(math.isfinite(e["heldout_loss"]) for e in record["evals"]) and len(record["evals"]) == 3
    assert {row["stage"] for row in record["history"]} == {"dense", "sparse"}
    checkpoint = tmp_path / "full" / "checkpoint"
    assert (checkpoint / "tokenizer.json").is_file() and (checkpoint / "training_loss.png").is_file()
    assert read_record(checkpoint)["check"]["loss"] == pytest.approx(record["check"]["loss"])
    config = json.loads((checkpoint / "config.json").read_text())
    assert config["index_topk"] == 32 and "layer_types" not in config
    _short_run(tmp_path / "cut", small_corpus, (4, 0))
    state = torch.load(tmp_path / "cut" / "train-state.pt", weights_only=False)
    assert state["state"]["step"] == 4
    # the cut run's state belongs to another recipe (4 steps): resuming it is refused, not mixed
    with pytest.raises(ValueError, match="another training run"):
        _short_run(tmp_path / "cut", small_corpus, (4, 8))


def test_an_interrupted_run_resumes_to_the_same_result(tmp_path, small_corpus, monkeypatch):
    from glmcheck.training import loop

    whole = _short_run(tmp_path / "whole", small_corpus, (4, 4))
    step = loop.Trainer._step

    def dies_at_step_6(self, index, probe, load):
        if index == 6:
            raise KeyboardInterrupt
        return step(self, index, probe, load)

    monkeypatch.setattr(loop.Trainer, "_step", dies_at_step_6)
    with pytest.raises(KeyboardInterrupt):
        _short_run(tmp_path / "cut", small_corpus, (4, 4))
    assert torch.load(tmp_path / "cut" / "train-state.pt", weights_only=False)["state"]["step"] == 4
    monkeypatch.setattr(loop.Trainer, "_step", step)
    resumed = _short_run(tmp_path / "cut", small_corpus, (4, 4))
    assert resumed["resumed"] and not whole["resumed"]
    assert [r["lm_loss"] for r in resumed["history"]] == [r["lm_loss"] for r in whole["history"]]
    assert resumed["check"]["loss"] == whole["check"]["loss"]


@pytest.mark.parametrize("name", list(TRAINED_MODELS))
def test_fixture_heldout_loss_matches_its_record(name):
    """Each committed trained model, loaded as a user loads it, gives the held-out check loss its
    training run recorded (fp32, the committed held-out documents, the checkpoint's tokenizer)."""
    path = MODELS_DIR / name
    if not path.is_dir():
        pytest.fail(f"fixture {path} is missing")
    record = read_record(path)
    tokenizer = load_tokenizer(path)
    docs = documents.load_documents(HELDOUT_FILE)
    assert [d.name for d in docs] == record["corpus"]["heldout_names"]
    windows = check_windows(tokenizer, docs, record["check"]["len"], record["check"]["windows"])
    loss = check_loss(path, windows)
    assert math.isfinite(loss) and loss == pytest.approx(record["check"]["loss"], abs=2e-2)
    assert loss < math.log(record["tokenizer"]["vocab_size"]) - 2  # far below a uniform guess


def test_reference_names_agree_with_the_recipes():
    assert {g.fixture for g in TRAINED_GEOMETRIES.values()} | {"ref-gpu-fp8"} == set(TRAINED_MODELS)
