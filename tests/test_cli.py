"""The CLI front end: `--help` and `--version` import no command (nor torch), and its table of
commands says what each command's own parser says."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import pytest

from glmcheck import cli


def test_help_and_version_import_neither_torch_nor_any_command():
    script = ("import sys, contextlib, io\n"
              "from glmcheck import cli\n"
              "for argv in (['--help'], ['--version']):\n"
              "    with contextlib.redirect_stdout(io.StringIO()):\n"
              "        try:\n"
              "            cli.main(argv)\n"
              "        except SystemExit as exit:\n"
              "            assert exit.code == 0, exit.code\n"
              "heavy = [m for m in sys.modules if m == 'torch' or m.startswith('glmcheck.commands.')]\n"
              "print(heavy)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]", result.stdout


def test_command_table_matches_each_commands_parser():
    """The name and help line of every command in cli.COMMANDS are the ones its module registers."""
    for name, (module, help_line) in cli.COMMANDS.items():
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        importlib.import_module(f"glmcheck.commands.{module}").add_parser(sub)
        (registered,) = sub.choices
        assert registered == name
        assert sub._choices_actions[0].help == help_line, name


def test_only_the_requested_command_is_built_in_full():
    parser = cli.build_parser(["union-stats", "--synthetic"])
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert "--synthetic" in sub.choices["union-stats"].format_help()
    assert "--model" not in sub.choices["layer0"].format_help()
    assert cli.requested_command(["--quiet", "layer0"]) == "layer0" and cli.requested_command(["--help"]) is None


@pytest.mark.parametrize("argv, message", [
    (["layer0", "--tokens", "x"], "glmcheck layer0: error: argument --tokens: invalid int value: 'x'"),
    (["layer0", "--nosuch"], "glmcheck: error: unrecognized arguments: --nosuch"),
    ([], "glmcheck: error: the following arguments are required: COMMAND"),
    (["bench", "--timing", "slow"], "glmcheck bench: error: argument --timing: invalid choice: 'slow'"),
])
def test_argparse_errors_are_one_line_and_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and err.startswith(message), err


def test_the_readme_main_command_runs_in_a_fresh_process(tmp_path):
    """`glmcheck layer0 --model tiny` as a new user runs it (no TRITON_INTERPRET set, nothing imported
    before): the Triton kernel in the interpreter on a CPU-only machine, verdict PASS."""
    import os
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run([sys.executable, "-m", "glmcheck", "layer0", "--model", "tiny", "--tokens", "24",
                             "--backends", "triton_sparse_mla", "--quiet", "--out", str(tmp_path / "run")],
                            capture_output=True, text=True, env=env, cwd=tmp_path, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "verdict: PASS" in result.stdout
