"""What a hostile user tried on a fresh clone (issue 68), each refused or judged as it should be: a plug-in cannot end
a check (SystemExit, its own KeyboardInterrupt, GeneratorExit, any BaseException are its FAIL row; a Ctrl-C still
stops the run), the library names its Python arguments where the CLI names flags, refusals the docs promise, notes
that print the limit as computed and a non-finite row as non-finite, and interruption messages that say what each
command keeps."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from glmcheck import cli
from tests.support.signals import default_sigint

QUICK = ["--model", "tiny", "--tokens", "16", "--band", "3", "--quiet"]
RAISING = '''
class Odd(BaseException):
    pass


def exits(q, kv, indices, sm_scale, d_v, *, topk_length=None):
    raise SystemExit(0)


def interrupts(q, kv, indices, sm_scale, d_v, *, topk_length=None):
    raise KeyboardInterrupt


def closes(q, kv, indices, sm_scale, d_v, *, topk_length=None):
    raise GeneratorExit


def odd(q, kv, indices, sm_scale, d_v, *, topk_length=None):
    raise Odd("an exception of its own")
'''


def test_a_plugin_that_raises_any_base_exception_is_its_fail_row(tmp_path, capsys):
    """`raise SystemExit(0)` in a plug-in ended the whole check with exit 0, no output, no record (issue 68)."""
    plugin = tmp_path / "raising.py"
    plugin.write_text(RAISING)
    specs = ",".join(f"{name}={plugin}:{name}" for name in ("exits", "interrupts", "closes", "odd"))
    code = cli.main(["layer0", *QUICK, "--backends", specs, "--out", str(tmp_path / "r")])
    out = capsys.readouterr().out
    assert code == 1, out
    rows = pd.read_parquet(tmp_path / "r" / "rows.parquet").set_index("backend")
    for name, kind in (("exits", "SystemExit"), ("interrupts", "KeyboardInterrupt"), ("closes", "GeneratorExit"),
                       ("odd", "Odd")):
        assert rows.loc[name, "verdict"] == "FAIL" and f"raised {kind}" in rows.loc[name, "note"], rows.loc[name]
        assert f"raised {kind}" in out
    assert cli.main(["report", str(tmp_path / "r")]) == 1


def test_a_plugin_that_exits_while_imported_is_one_line(tmp_path, capsys):
    plugin = tmp_path / "leaves.py"
    plugin.write_text("raise SystemExit(0)\n")
    code = cli.main(["layer0", *QUICK, "--backends", f"mine={plugin}:f"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "backend 'mine': cannot import" in err and "SystemExit" in err, err


def test_ctrl_c_while_a_plugin_runs_still_stops_the_run(tmp_path):
    """A SIGINT to the process is no plug-in's exception: the run stops, exit 130, saying what layer0 keeps."""
    marker = tmp_path / "started"
    plugin = tmp_path / "slow.py"
    plugin.write_text(f"import time\n\ndef slow(q, kv, indices, sm_scale, d_v, *, topk_length=None):\n"
                      f"    open({str(marker)!r}, 'w').close()\n    time.sleep(120)\n")
    process = subprocess.Popen([sys.executable, "-m", "glmcheck", "layer0", *QUICK, "--backends", f"slow={plugin}:slow",
                                "--out", str(tmp_path / "r")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env={**os.environ, "TRITON_INTERPRET": "1"},
                               preexec_fn=default_sigint)  # noqa: PLW1509  (restores SIGINT; no threads yet)
    deadline = time.monotonic() + 120
    while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert marker.exists(), process.communicate()[1].decode()
    process.send_signal(signal.SIGINT)
    err = process.communicate(timeout=60)[1].decode()
    assert process.returncode == 130, err
    assert "glmcheck layer0: interrupted; nothing was written" in err and "Traceback" not in err, err
    assert not (tmp_path / "r").exists()


def test_each_command_says_what_it_keeps_when_interrupted():
    assert "the prompt lengths finished so far are kept" in cli.interrupted_message("logits")
    assert "the prompts finished so far are kept" in cli.interrupted_message("firsttoken")
    assert cli.interrupted_message("serve") == "glmcheck serve: interrupted; nothing was served"
    for command in ("layer0", "drift", "sweep", "bench", "tasks"):
        message = cli.interrupted_message(command)
        assert "nothing was written" in message and "--out" not in message, message


# ---- the library names its arguments; the CLI its flags -------------------------------------------------------

@pytest.mark.parametrize("fields, words", [
    ({"model": "nosuch"}, "model must be one of"),
    ({"band": 0}, "band must be an int >= 1, got 0"),
    ({"gate_ratio": math.nan}, "gate_ratio must be a number in [1, 4]"),
    ({"tp": 0}, "tp must be an int >= 1"),
    ({"backends": ["reference:bf16", "reference:bf16"]}, "backends names reference:bf16 twice"),
    ({"backends": ""}, "backends names no backend"),
    ({"exact": "fp16"}, "exact must be one of fp32, fp64"),
    ({"kv_cache_dtype": "fp4"}, "kv_cache_dtype must be one of"),
    ({"device": "gpu"}, "device must be cpu, cuda or cuda:N"),
    ({"max_rel_l2": -1.0}, "max_rel_l2 must be a finite number > 0"),
    ({"seed": -1}, "seed must be an int in"),
])
def test_check_options_refuse_on_construction_naming_the_argument(fields, words):
    from glmcheck.evaluate import CheckOptions

    with pytest.raises(ValueError) as caught:
        CheckOptions(**fields)
    assert str(caught.value).startswith(words) and "--" not in str(caught.value).split(",")[0], caught.value


@pytest.mark.parametrize("call, words", [
    (lambda ev, o: ev.logits(o, tokens=[]), "tokens names no prompt length"),
    (lambda ev, o: ev.logits(o, tokens=[32, 0]), "tokens must be an int >= 1, got 0"),
    (lambda ev, o: ev.layer0(o, text=""), "text must be a non-empty prompt text"),
    (lambda ev, o: ev.firsttoken(o, tie_gap=1e9), "tie_gap must be a number of nats in [0, 1]"),
    (lambda ev, o: ev.firsttoken(o, continue_tokens=-1), "continue_tokens must be an int >= 0"),
    (lambda ev, o: ev.layer0(o, tokens=0), "tokens must be an int >= 1"),
])
def test_each_check_refuses_its_arguments_naming_them(call, words):
    """`evaluate.logits(options, tokens=[])` returned a FAIL report (issue 68); now a ValueError before any model."""
    import glmcheck.evaluate as ev

    with pytest.raises(ValueError) as caught:
        call(ev, ev.CheckOptions(model="tiny", quiet=True))
    assert str(caught.value).startswith(words), caught.value


@pytest.mark.parametrize("args, words", [
    (["layer0", "--band", "0"], "--band must be an int >= 1, got 0"),
    (["layer0", "--gate-ratio", "nan"], "--gate-ratio must be a number in [1, 4]"),
    (["layer0", "--backends", "reference:bf16,reference:bf16"], "--backends names reference:bf16 twice"),
    (["layer0", "--text", ""], "--text must be a non-empty prompt text"),
    (["firsttoken", "--tie-gap", "1e9"], "--tie-gap must be a number of nats in [0, 1]"),
    (["firsttoken", "--tie-gap", "1.5"], "--tie-gap must be a number of nats in [0, 1]"),
    (["serve", "--backend", "reference", "--max-logprobs", "0"], "--max-logprobs must be an int >= 1, got 0"),
    (["layer0", "--model", "glm-5.2", "--tokens", "4096"], "hours on the CPU"),
    (["logits", "--model", "ref-gpu", "--tokens", "4096"], "hours on the CPU"),
])
def test_the_cli_refuses_in_one_line_naming_the_flag(args, words, capsys):
    started = time.monotonic()
    code = cli.main(args)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and words in err and "Traceback" not in err, err
    assert time.monotonic() - started < 60, "a refusal comes before anything is built"


def test_the_cpu_estimate_refuses_hours_and_keeps_the_main_command():
    """The estimate behind the refusal (`glmcheck.model.cpu_time`): GLM-5.2's layer 0 at 4096 tokens is hours on the
    CPU, the README's main command (ref-cpu, 128 tokens, every CPU backend) and a tiny sweep well within the limit."""
    from glmcheck.model.cpu_time import CPU_CHECK_LIMIT_S, check_cpu_time
    from glmcheck.model.load import ModelSpec, resolve_model

    backends = ["reference"] * 2 + ["band:0"] * 4 + ["triton_sparse_mla", "triton_sparse_mla:union2", "hf_sdpa"]
    glm, _ = resolve_model(ModelSpec(preset="glm-5.2"), "cpu", layer0_only=True)
    with pytest.raises(ValueError, match="hours on the CPU"):
        check_cpu_time(glm, [(4096, b) for b in backends], 8, "tokens")
    small, _ = resolve_model(ModelSpec(preset="ref-cpu"), "cpu", layer0_only=True)
    check_cpu_time(small, [(128, b) for b in backends], 1, "tokens")
    check_cpu_time(small, [(CPU_CHECK_LIMIT_S // 4, b) for b in backends], 1, "tokens")


# ---- notes that read as they should ---------------------------------------------------------------------------

def test_a_position_note_prints_the_limit_as_computed():
    """'4 of 128 positions (3.1 %) beyond ... (at most 4)' read as a row that should pass: the limit is 3.54."""
    import torch

    from glmcheck.checks.position_gate import PositionBand, PositionGate
    from glmcheck.checks.positions import PositionStatistics

    band = PositionBand(torch.full((3, 128), 1e-4, dtype=torch.float64), ("band:0", "band:1", "band:2"))
    kl = torch.full((128,), 1e-4, dtype=torch.float64)
    kl[:4] = 1.0
    row = PositionStatistics(kl, torch.ones(128, dtype=torch.bool), torch.zeros(128, dtype=torch.float64))
    verdict, why, _ = PositionGate().judge(row, band)
    assert verdict == "FAIL" and "4 of 128 positions" in why and "(at most 3.54)" in why, why


def test_a_plugin_with_nan_logits_names_no_token_and_no_tie(tmp_path, capsys):
    """Its disagreement row showed token '<bos>' (the argmax of NaN), logprob nan and 'near tie: yes'."""
    plugin = tmp_path / "nan.py"
    plugin.write_text("import torch\n\ndef nan(q, kv, indices, sm_scale, d_v, *, topk_length=None):\n"
                      "    return torch.full((q.shape[0], q.shape[1], d_v), float('nan'), dtype=torch.bfloat16)\n")
    code = cli.main(["firsttoken", "--model", "tiny", "--band", "3", "--limit", "2", "--quiet",
                     "--backends", f"nan={plugin}:nan", "--out", str(tmp_path / "r")])
    out = capsys.readouterr().out
    assert code == 1, out
    line = next(line for line in out.splitlines() if line.startswith("| nan "))
    assert "FAIL" in line and "non-finite logits" in out, out
    disagreements = [line for line in out.splitlines() if "| nan " in line and not line.startswith("| nan ")]
    assert not disagreements and "<bos>" not in out, out  # no token, no tie: no disagreement row at all


def test_an_os_error_without_a_file_names_where_it_was_raised():
    from glmcheck.process.wording import error_line

    try:
        os.getcwd  # noqa: B018
        raise FileNotFoundError(2, "No such file or directory")
    except FileNotFoundError as err:
        line = error_line(err)
    assert line.startswith("[Errno 2] No such file or directory (raised in ") and Path(__file__).name in line, line
