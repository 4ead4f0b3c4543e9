"""Records are never lost, usage that would be ignored or wrong is refused, and the command line
answers bad usage before importing torch (issue 44, items 1, 7 and 8).

The cases of `CASES` belong to the command-line bad-input matrix (`tests/test_bad_input_matrix.py`
holds the rest; docs/reliability.md counts both): exit 2, one line naming the option, nothing
written anywhere under the test's folder or the working directory.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from glmcheck import cli
from glmcheck.data.traces import write_trace
from glmcheck.records.store import read_record, write_record
from tests.test_bad_input_matrix import _case_id, _tree, bad_files, broken_checkpoints  # noqa: F401  (fixtures)

REPO = Path(__file__).resolve().parents[1]
TINY_CHECKPOINT = str(REPO / "fixtures" / "tiny-bf16")  # dummy weights: no tokenizer files
QUICK = ["--model", "tiny", "--quiet", "--backends", "reference:fp64"]  # under test: exact, so it PASSes


@pytest.fixture
def records(bad_files):  # noqa: F811  (the fixture imported above)
    """Beside bad_files' inputs: a finished firsttoken record with its items/, a folder of someone's
    files, an index trace."""
    finished = bad_files / "firsttoken-record"
    write_record(finished, {"command": "firsttoken", "facts": {}, "verdict": "PASS"}, [{"comparison": "x"}])
    (finished / "items").mkdir()
    (finished / "items" / "fingerprint.json").write_text(json.dumps({"command": "firsttoken"}))
    (finished / "items" / "p1-0123456789.json").write_text(json.dumps({"key": "p1", "payload": []}))
    (bad_files / "mine").mkdir()
    (bad_files / "mine" / "notes.txt").write_text("not a record")
    write_trace(bad_files / "trace.safetensors", {0: torch.full((8, 4), -1, dtype=torch.int32)}, {"seq_lens": [8]})
    return bad_files


CASES = [  # (args, words in the one error line)
    # item 1: --out never destroys a record, of any command, nor writes among someone's files
    (["layer0", "--out", "{tmp}/bad-record"],
     "--out {tmp}/bad-record already holds a layer0 record; use another --out, or --overwrite to replace it"),
    (["drift", "--out", "{tmp}/firsttoken-record"],
     "already holds a firsttoken record; use another --out, or --overwrite"),
    (["logits", "--tokens", "24", "--out", "{tmp}/bad-record"], "already holds a layer0 record"),
    (["logits", "--tokens", "24", "--out", "{tmp}/firsttoken-record"],
     "holds a run with other settings ("),
    (["firsttoken", "--out", "{tmp}/mine"],
     ("--out {tmp}/mine already holds 1 entry (notes.txt) and no glmcheck record; use another --out, or --overwrite "
      "to write the record among them")),
    (["layer0", "--out", "{tmp}/mine"], "already holds 1 entry (notes.txt) and no glmcheck record"),
    (["union-stats", "--out", "{tmp}/firsttoken-record"], "already holds a firsttoken record"),
    (["union-stats", "--out", "{tmp}/mine"], "already holds 1 entry (notes.txt) and no glmcheck record"),
    (["bench", "--out", "{tmp}/bad-record"], "already holds a layer0 record"),
    (["capture-indices", "--tokens", "8", "--out", "{tmp}/trace.safetensors"],
     "--out {tmp}/trace.safetensors already exists; use another --out, or --overwrite to replace it"),
    # item 7: accepted and wrong
    (["layer0", "--out", ""], "--out '' names no directory"),
    (["logits", "--out", ""], "--out '' names no directory"),
    (["union-stats", "--out", ""], "--out '' names no directory"),
    (["bench", "--out", ""], "--out '' names no directory"),
    (["capture-indices", "--tokens", "8", "--out", ""], "--out '' names no file"),
    (["logits", "--tokens", "64,,96"],
     "--tokens must be a comma-separated list of positive ints, got '64,,96' (an empty item)"),
    (["logits", "--tokens", "24,32,24"], "--tokens names 24 more than once"),
    (["union-stats", "--indices", "{tmp}/trace.safetensors", "--topk", "7", "--mode", "uniform"],
     "--topk and --mode apply to synthetic indices only"),
    (["union-stats", "--indices", "{tmp}/trace.safetensors", "--topk", "7"], "--topk applies to synthetic indices"),
    (["selftest", "--seeds", "3"], "--seeds applies to the verdict-rates run only: add --model"),
    (["selftest", "--tokens", "32", "--checks", "layer0"], "--tokens, --checks apply to the verdict-rates run only"),
    (["selftest", "--model", "tiny", "--mutants"], "--mutants applies to the kernel suite"),
    # item 8: messages that name what is wrong
    (["union-stats", "--indices", "{tmp}"], "--indices {tmp} is a directory; expected an index trace file"),
    (["plan", "--tp", "0"], "--tp must be an int >= 1, got 0"),
    (["plan", "--tp", "3"], "--tp 3 must divide attention heads (64)"),
    (["plan", "--tokens", "-5"], "--tokens must be an int >= 1, got -5"),
    (["firsttoken", "--checkpoint", TINY_CHECKPOINT, "--limit", "1"],
     (f"checkpoint '{TINY_CHECKPOINT}' ships no tokenizer (none of tokenizer.json, tokenizer.model, vocab.json), "
      f"so text prompts cannot be encoded for it; add its tokenizer files, or use a --model preset")),
]


@pytest.mark.parametrize("args, words", CASES, ids=_case_id)
def test_cli_refuses_with_one_line_and_writes_nothing(args, words, records, capsys):
    args = [a.replace("{tmp}", str(records)) for a in args]
    before = _tree(records)
    code = cli.main(args + (["--quiet"] if args[0] in ("layer0", "logits", "drift", "firsttoken", "selftest") else []))
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert words.replace("{tmp}", str(records)) in err, err
    assert _tree(records) == before, "a refused run changed files"


# ---- --overwrite: the record in --out is replaced whole; other files stay ---------------------------------------


def test_overwrite_replaces_a_record_of_another_command_whole(records, capsys):
    out = records / "firsttoken-record"
    assert cli.main(["layer0", "--tokens", "24", *QUICK, "--out", str(out), "--overwrite"]) == 0, \
        capsys.readouterr().err
    assert read_record(out).summary["command"] == "layer0"
    assert not (out / "items").exists(), "the firsttoken run's items were left behind: a mixed directory"


def test_overwrite_writes_among_other_files_and_keeps_them(records):
    assert cli.main(["union-stats", "--out", str(records / "mine"), "--overwrite"]) == 0
    assert (records / "mine" / "notes.txt").read_text() == "not a record"
    assert read_record(records / "mine").summary["command"] == "union-stats"


def test_overwrite_starts_a_resumable_run_afresh(tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.main(["logits", "--tokens", "24,32", *QUICK, "--out", str(out)]) == 0
    assert cli.main(["logits", "--tokens", "24", *QUICK, "--out", str(out), "--overwrite"]) == 0, \
        capsys.readouterr().err
    record = read_record(out)
    assert record.summary["facts"]["resumed_items"] == 0
    items = sorted(p.name for p in (out / "items").glob("*.json") if p.name != "fingerprint.json")
    assert len(items) == 1 and items[0].startswith("24-"), items


def test_capture_overwrite_replaces_the_trace(records):
    trace = records / "trace.safetensors"
    assert cli.main(["capture-indices", "--model", "tiny", "--tokens", "16", "--out", str(trace), "--overwrite"]) == 0
    from glmcheck.data.traces import read_trace

    layers, meta = read_trace(trace)
    assert meta["seq_lens"] == [16] and all(idx.shape[0] == 16 for idx in layers.values())


def test_a_resumed_run_says_it_resumed(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["logits", "--tokens", "24,32", *QUICK, "--out", str(out)]
    assert cli.main(args) == 0
    assert "resuming" not in capsys.readouterr().err
    (out / "summary.json").unlink()  # as if killed after both lengths finished
    assert cli.main(args) == 0
    err = capsys.readouterr().err
    assert f"resuming {out}: 2 of 2 lengths finished there earlier are kept; 0 left to compute" in err, err
    assert read_record(out).summary["facts"]["resumed_items"] == 2


# ---- item 7: union-stats counts a slot outside [0, T) as empty, as the kernel's contract says -----------------------


def test_union_stats_counts_out_of_range_slots_as_empty(tmp_path, capsys):
    tokens = 8
    inside = torch.arange(tokens, dtype=torch.int32).view(tokens, 1).expand(tokens, 4).contiguous()
    outside = torch.full((tokens, 32), tokens + 5, dtype=torch.int32)  # 32 slots a token, none a row of the pool
    write_trace(tmp_path / "t.safetensors", {0: outside, 1: inside}, {"seq_lens": [tokens]})
    assert cli.main(["union-stats", "--indices", str(tmp_path / "t.safetensors"), "--out", str(tmp_path / "r")]) == 0
    rows = read_record(tmp_path / "r").rows
    valid = dict(zip(rows["layer"], rows["valid_rows_per_token"]))
    assert valid[0] == 0 and valid[1] == 4, valid  # the duplicated in-range row counts per slot


# ---- item 8: bad usage is answered before torch, transformers or triton is imported -------------------------------

FAST_ERRORS = [  # argparse's own errors for every command, and the option checks that need no model
    *[[name, "--bogus"] for name in cli.COMMANDS],
    ["layer0", "--tokens", "x"], ["logits", "--tokens", "64,,96"], ["logits", "--tokens", "64,64"],
    ["layer0", "--out", ""], ["layer0", "--seed", "-1"], ["drift", "--gate-ratio", "nan"], ["drift", "--tokens", "0"],
    ["firsttoken", "--continue", "-1"], ["firsttoken", "--tie-gap", "inf"], ["layer0", "--layers", "100000"],
    ["union-stats", "--indices", "."], ["union-stats", "--seed", "-1"], ["plan", "--tp", "0"],
    ["plan", "--gpu-gib", "nan"], ["selftest", "--seeds", "3"], ["selfcheck", "--seed", "-1"],
    ["capture-indices", "--tokens", "8", "--out", "t.txt"], ["bench", "--pair-rounds", "-1"],
    ["backends", "--heads", "0"],
]


def test_bad_usage_imports_no_torch(tmp_path):
    """Each of FAST_ERRORS exits 2 with one line, and none of them imported torch, transformers or triton
    (they cost 10-15 s of imports before: every error waited for them)."""
    script = ("import contextlib, io, json, sys\n"
              "from glmcheck import cli\n"
              "codes = []\n"
              f"for argv in {FAST_ERRORS!r}:\n"
              "    err = io.StringIO()\n"
              "    with contextlib.redirect_stderr(err):\n"
              "        try:\n"
              "            code = cli.main(argv)\n"
              "        except SystemExit as exit:\n"
              "            code = exit.code\n"
              "    codes.append([code, err.getvalue().count('\\n')])\n"
              "heavy = sorted(m for m in ('torch', 'transformers', 'triton', 'pandas') if m in sys.modules)\n"
              "print(json.dumps({'codes': codes, 'heavy': heavy}))\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, check=True)
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["heavy"] == [], report
    assert report["codes"] == [[2, 1]] * len(FAST_ERRORS), list(zip(FAST_ERRORS, report["codes"]))
    assert not list(tmp_path.iterdir()), "a refused command wrote into the working directory"


def test_firsttoken_tie_gap_default_is_the_checks_own():
    """--tie-gap's default is resolved when firsttoken runs (its module imports torch); its help says the value."""
    from glmcheck.checks.firsttoken import DEFAULT_TIE_GAP

    parser = cli.build_parser(["firsttoken"])
    sub = next(a for a in parser._actions if a.dest == "command").choices["firsttoken"]
    assert f"nats, default {DEFAULT_TIE_GAP:g})" in " ".join(sub.format_help().split())
