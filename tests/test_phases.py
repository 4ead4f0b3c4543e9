"""`--profile` (issue 55): where a run's wall time went, by phase, on stderr at the end; GLMCHECK_PROFILE=1 for any
command."""

from __future__ import annotations

import re
import time

from glmcheck import cli
from glmcheck.process.phases import CLOCK, PhaseClock


def _table(err: str) -> dict[str, float]:
    part = err.split("where the time went (--profile):", 1)[1]
    return {m[1]: float(m[2]) for m in re.finditer(r"^(\w+)\s+([\d.]+)", part, re.MULTILINE) if m[1] != "phase"}


def test_layer0_prints_the_phase_table(tmp_path, capsys):
    code = cli.main(["layer0", "--model", "tiny", "--backends", "torch_bf16", "--quiet", "--profile", "--out",
                     str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code in (0, 1), err
    phases = _table(err)
    assert {"imports", "setup", "build", "forwards", "compare", "write", "other", "total"} <= set(phases), phases
    # the table shows hundredths: on tiny the comparisons can take under 5 ms (0.00 printed); the clock holds them
    assert phases["forwards"] > 0 and CLOCK.seconds["compare"] > 0
    assert "torch_bf16" in CLOCK.rows and abs(sum(CLOCK.rows.values()) - CLOCK.seconds["forwards"]) < 1e-9
    assert re.search(r"^forwards by row \(s, compiles in\): .*torch_bf16 [\d.]+", err, re.MULTILINE), err
    parts = sum(v for k, v in phases.items() if k != "total")
    assert abs(parts - phases["total"]) <= 0.02 + 0.01 * len(phases), phases  # the shares add up (rounding)


def test_the_environment_asks_for_it_in_any_command(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("GLMCHECK_PROFILE", raising=False)
    cli.main(["layer0", "--model", "tiny", "--backends", "torch_bf16", "--quiet", "--out", str(tmp_path / "r")])
    assert "where the time went" not in capsys.readouterr().err, "not unless asked"
    monkeypatch.setenv("GLMCHECK_PROFILE", "1")
    assert cli.main(["report", str(tmp_path / "r")]) in (0, 1)
    phases = _table(capsys.readouterr().err)
    assert "imports" not in phases and phases["total"] > 0, "report enters no phase: all of it is other"


def test_nested_phases_add_to_their_own_name_and_imports_close_once():
    clock = PhaseClock()
    clock.begin()
    time.sleep(0.01)
    with clock.phase("forwards"):
        time.sleep(0.01)
        with clock.phase("compile"):
            time.sleep(0.01)
    with clock.phase("compare"):
        pass
    assert clock.seconds["imports"] >= 0.01 and clock.seconds["forwards"] >= 0.02
    assert clock.seconds["compile"] >= 0.01
    table = clock.table()
    forwards = float(re.search(r"^forwards\s+([\d.]+)", table, re.MULTILINE)[1])
    assert forwards < clock.seconds["forwards"], "the table shows forwards without the compiles inside them"
