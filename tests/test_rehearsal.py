"""A rank rehearsal (`--rehearse-rank R`): one rank's shard of a TP-N model alone, its all-reduces the identity,
a check's forwards end to end, measured against the plan; no verdict (exit 4)."""

from __future__ import annotations

import json

import pytest
import torch

from glmcheck import cli, evaluate
from glmcheck.model.weight_bytes import rank_weights
from glmcheck.records.store import read_record


def options(**kw) -> evaluate.CheckOptions:
    return evaluate.CheckOptions(model="tiny", tp=2, quiet=True, band=3, backends=["triton_sparse_mla"], **kw)


@pytest.mark.parametrize("weights", ["bf16", "fp8"])
def test_a_rehearsed_rank_computes_its_heads_of_layer0_and_is_measured(weights):
    """Layer 0 reads only the replicated embedding, so rank 1's rehearsal gives heads 4..7 of the whole run's layer-0
    latents bit for bit; its report has no verdict, the build's bytes are the plan's, each forward is timed."""
    whole = evaluate.layer0(options(weights=weights), tokens=32)
    rank = evaluate.layer0(options(weights=weights, rehearse_rank=1), tokens=32)
    assert whole.verdict == "PASS" and rank.verdict == "REHEARSAL" and rank.exit_code == 4
    mine, all_heads = (r.tensors() if callable(r.tensors) else r.tensors for r in (rank, whole))
    latents = [name for name in mine if name.startswith("latent/")]
    assert "latent/triton_sparse_mla" in latents
    for name in latents:
        assert mine[name].shape[1] == 4 and torch.equal(mine[name], all_heads[name][:, 4:8]), name
    assert {row["verdict"] for row in rank.rows} == {"-"}
    measured = rank.extra["rehearsal"]
    assert (measured["rank"], measured["tp"], measured["weights"]) == (1, 2, weights)
    planned = rank_weights(evaluate.setup.Setup(options(weights=weights), layer0_only=True, one_prompt=True,
                                                tokens=32).config, 2, weights)
    assert abs(measured["held"]["total"] - planned.held) <= 64  # the rotary embedding's two buffers
    forwards = measured["forwards"]
    assert [f["tokens"] for f in forwards] == [32] and forwards[0]["forwards"] == 3 + 3 + 1
    assert forwards[0]["seconds_median"] > 0 and forwards[0]["device"] > 0 and forwards[0]["plan"] > planned.held


def test_the_cli_says_rehearsal_loudly_and_exits_4(tmp_path, capsys):
    out = tmp_path / "rehearsal"
    code = cli.main(["logits", "--model", "tiny", "--tp", "2", "--rehearse-rank", "0", "--weights", "fp8",
                     "--tokens", "24", "--backends", "reference:bf16", "--band", "1", "--quiet", "--out", str(out)])
    printed = capsys.readouterr()
    assert code == 4, printed.err
    assert "REHEARSAL: rank 0 of --tp 2 alone on cpu" in printed.out and "verdict: REHEARSAL" in printed.out
    assert "REHEARSAL" in printed.err
    record = read_record(out)
    assert record.summary["verdict"] == "REHEARSAL" and record.summary["options"]["rehearse_rank"] == 0
    assert record.summary["rehearsal"]["forwards"][0]["tokens"] == 24
    assert json.loads(record.rows.to_json(orient="records")) and set(record.rows["verdict"]) == {"-"}
    assert cli.main(["report", str(out)]) == 4
    assert "s/fwd" in capsys.readouterr().out
    assert cli.main(["report", str(out), "--format", "json"]) == 4
    assert json.loads(capsys.readouterr().out)["rehearsal"]["weights"] == "fp8"


@pytest.mark.parametrize("args, words", [
    (["--tp", "2", "--rehearse-rank", "2"], "--rehearse-rank must name a rank of --tp 2 (0 to 1), got 2"),
    (["--tp", "2", "--rehearse-rank", "-1"], "--rehearse-rank must be an int >= 0, got -1"),
])
def test_a_rank_outside_tp_is_one_line(tmp_path, capsys, args, words):
    code = cli.main(["layer0", "--model", "tiny", "--quiet", "--out", str(tmp_path / "x"), *args])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and words in err, err
    assert not (tmp_path / "x").exists()


def test_under_serving_calls_the_plan_beside_a_rehearsal_holds_the_pool():
    """--calls serving: the plan each rehearsed forward is set against counts the pool those forwards hold
    (`serving_pool` on this device), on top of the one-shot plan."""
    from glmcheck.model.engine_pool import serving_pool
    from glmcheck.model.engine_shape import EngineShape

    one_shot = evaluate.layer0(options(rehearse_rank=0), tokens=32).extra["rehearsal"]["forwards"][0]
    rank = evaluate.layer0(options(rehearse_rank=0, calls="serving"), tokens=32)
    forward = rank.extra["rehearsal"]["forwards"][0]
    config = evaluate.setup.Setup(options(), layer0_only=True, one_prompt=True, tokens=32).config
    rows, pooled = serving_pool(config, EngineShape(), 32, "cpu")
    assert rows > 0 and forward["plan_pool"] == pooled and one_shot["plan_pool"] == 0
    assert abs(forward["plan"] - one_shot["plan"] - pooled) <= 2  # GiB rounding of the terms
