"""`glmcheck drift`: where the error enters and how it grows, layer by layer.

One forward per backend (the reference twice: the control; `reference:bf16` once: the floor)
capturing every layer's output hidden state in fp64. Rows: (backend, layer, cosine, rel-L2,
max-abs) against the reference, with the control's and the floor's rel-L2 at that layer (the
band). A row passes when its rel-L2 <= gate_ratio x the band or <= max_rel_l2.
"""

from __future__ import annotations

import math

import torch

from glmcheck.checks import metrics
from glmcheck.checks.common import FLOOR_BACKEND, INFO, ComparisonRow, Gate, not_called_row, overall
from glmcheck.checks.layer0 import CheckResult
from glmcheck.checks.runner import BackendRun, SwapOptions, forward_under

DEFAULT_MAX_REL_L2 = 5e-2  # as logits: model-level differences are amplified by routing/top-k flips


def _layer_rows(name: str, label: str, run: BackendRun, ref: BackendRun, layers: int, tokens: int,
                bands: dict[int, tuple[float, float]] | None, gate: Gate) -> list[ComparisonRow]:
    rows = []
    for layer in range(layers):
        actual, expected = run.captured.hidden[layer], ref.captured.hidden[layer]
        row = ComparisonRow(label, name, ref.name, "hidden", metrics.cosine(actual, expected),
                            metrics.rel_l2(actual, expected), metrics.max_abs(actual, expected), tokens=tokens)
        row.extra = {"layer": layer}
        if bands is None:
            row.verdict = INFO
        else:
            control, floor = bands[layer]
            row.extra |= {"control_rel_l2": control, "floor_rel_l2": floor}
            limit = max(control, floor) if math.isfinite(control) else math.nan
            row.verdict = gate.verdict(row.rel_l2, limit)
        rows.append(row)
    return rows


def run_drift(model: torch.nn.Module, input_ids: torch.Tensor, backends: list[str], reference: str,
              options: SwapOptions = SwapOptions(), gate: Gate = Gate(max_rel_l2=DEFAULT_MAX_REL_L2),
              progress=None) -> CheckResult:
    """Per-layer hidden-state drift of every backend against the reference (see module docstring)."""
    layers = model.config.num_hidden_layers
    tokens = input_ids.shape[1]
    others = [b for b in dict.fromkeys(backends) if b not in (reference, FLOOR_BACKEND)]
    runs = []
    for name in [reference, reference, FLOOR_BACKEND] + others:
        runs.append(forward_under(model, input_ids, name, options, hidden_layers=range(layers)))
        if progress is not None:
            progress.update(1)
    ref, rerun, floor = runs[0], runs[1], runs[2]
    control_rows = _layer_rows(reference, f"control: {reference} vs itself (rerun)", rerun, ref, layers,
                               tokens, None, gate)
    floor_rows = _layer_rows(FLOOR_BACKEND, f"floor: {FLOOR_BACKEND} vs {reference}", floor, ref, layers,
                             tokens, None, gate)
    bands = {layer: (control_rows[layer].rel_l2, floor_rows[layer].rel_l2) for layer in range(layers)}
    rows = control_rows + floor_rows
    for run in runs[3:]:
        expected, seen = run.missing_calls(layers, options.tp)
        if expected:
            rows.append(not_called_row(run.name, reference, "hidden", expected, seen, tokens=tokens))
            continue
        rows += _layer_rows(run.name, f"{run.name} vs {reference}", run, ref, layers, tokens, bands, gate)
    facts = {"tokens": tokens, "layers": layers, "gate": gate.describe(),
             "seconds": {r.name: round(r.seconds, 3) for r in runs}}
    return CheckResult(rows, overall(rows), facts)
