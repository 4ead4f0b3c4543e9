"""`scripts/position_gate_rates.py`'s candidate count (`RunForgivingGate`, analysis only): the largest short run of
positions beyond the band is left out of the count, a spread of beyond positions is not."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

from glmcheck.checks.position_gate import PositionBand
from glmcheck.checks.positions import PositionStatistics

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "position_gate_rates.py"


def _script():
    spec = importlib.util.spec_from_file_location("position_gate_rates", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _row(kl: torch.Tensor) -> PositionStatistics:
    return PositionStatistics(kl, torch.ones_like(kl, dtype=torch.bool), kl)


def test_one_short_dense_run_is_forgiven_a_spread_is_not():
    gates = _script()
    positions = 1024
    band = PositionBand.of([_row(torch.full((positions,), 1e-3 * (k + 1), dtype=torch.float64)) for k in range(3)],
                           ["band:0", "band:1", "band:2"])
    burst = torch.full((positions,), 1e-3, dtype=torch.float64)
    burst[500:540] = 1.0  # one flip: 40 neighbouring positions beyond
    spread = torch.full((positions,), 1e-3, dtype=torch.float64)
    spread[::25] = 1.0  # 41 positions beyond, 25 apart
    plain, forgiving = gates.PositionGate(), gates.RunForgivingGate(forgive=1, run_length=64, run_gap=4)
    assert plain.judge(_row(burst), band)[0] == "FAIL" and plain.judge(_row(spread), band)[0] == "FAIL"
    verdict, _, measures = forgiving.judge(_row(burst), band)
    assert verdict == "PASS" and measures["beyond"] == 0 and measures["runs"] == 1
    verdict, _, measures = forgiving.judge(_row(spread), band)
    assert verdict == "FAIL" and measures["beyond"] == 40 and measures["runs"] == 41
    long_run = torch.full((positions,), 1e-3, dtype=torch.float64)
    long_run[300:400] = 1.0  # longer than run_length: counted
    assert forgiving.judge(_row(long_run), band)[0] == "FAIL"
