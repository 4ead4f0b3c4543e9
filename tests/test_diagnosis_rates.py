"""The diagnosis's rates (`glmcheck.selftest.diagnosis_rates`, `scripts/measure_diagnosis.py`): a test-sized run (one
seed, three fault kinds, one legitimate row) and, with -m slow, the measurement of docs/diagnosis.md, "Measured"
(20 seeds, every planted fault, the kernel's per-token and union paths)."""

from __future__ import annotations

import pytest

from glmcheck.selftest.diagnosis_rates import CUTTABLE, measure, table


def test_a_seed_names_each_structure_and_says_nothing_of_a_legitimate_row():
    tallies = {t.name: t for t in measure(seeds=[0], tokens=64, legitimate=["band:4"],
                                          only=["fault:heads_swapped", "fault:t3mod4_last_dropped", "fault:dims16-32"])}
    for name in ("fault:heads_swapped", "fault:t3mod4_last_dropped", "fault:dims16-32"):
        tally = tallies[name]
        assert (tally.fails, tally.named, tally.reproduced, tally.fixed) == (1, 1, 1, 1), (name, tally.said)
        assert tally.kept[0] <= 1 / 8
    assert tallies["band:4"].silent == 1
    assert "named: 3/3" in table(list(tallies.values()))


@pytest.mark.slow
def test_the_measurement():
    tallies = measure(seeds=range(20), tokens=128)
    faults = [t for t in tallies if not t.legitimate]
    legit = [t for t in tallies if t.legitimate]
    for t in faults:
        assert t.fails == t.runs and t.named >= 0.9 * t.fails, (t.name, t.said)
        assert t.reproduced == t.fixed == len(t.kept) == t.fails, t.name
        if any(key in t.name for key in CUTTABLE):
            assert max(t.kept) <= 1 / 8, t.name
    for t in legit:
        assert t.silent >= 0.95 * t.runs, (t.name, t.said)
