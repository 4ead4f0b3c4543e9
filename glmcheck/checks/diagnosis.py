"""The diagnosis of a FAIL row: where its error lies and what the kernel did, in a few lines with their figures.

`diagnose(exact, row, band, ...)` reads one row's output beside the exact output (fp64) and the band's ideal
variants, all [T, H, D] of one kernel call, and finds (each only when the row is beyond the band there and the rest
within it, so a legitimate row gets none):

- heads beyond the band (`diagnosis_structure.element_finding`), and whether each holds another head's exact output
  (`diagnosis_slots.head_swap_finding`);
- the tokens that carry the error: a period t mod G, an onset, a prefix, the tokens with empty slots or attending row
  0, rows >= 2^k or rows 2^k behind, or a few named ones (`diagnosis_tokens`); else its trend with position;
- the output dims beyond the band (a block, a period);
- with the call's inputs, the change of a failing token's slots or scores that reproduces its output
  (`diagnosis_slots.slot_finding`: "drops a row" or "reads a wrong row");
- the scale and temperature biases layer0 measures, when outside the band's window, with the share of the
  difference each explains;
- when none of the structures holds: how evenly the error is spread.

The findings are ordered by `ORDER` (what the kernel did before where, structure before size) and the first
MAX_LINES are printed, each line naming its row (`glmcheck.checks.diagnosis_text`). `glmcheck.checks.diagnosis_runs`
runs it for layer0 and drift.
"""

from __future__ import annotations

import math

import torch

from glmcheck.checks.band import BIAS_SIGMAS, BIAS_STATS, Band
from glmcheck.checks.diagnosis_calls import LayerCall
from glmcheck.checks.diagnosis_slots import head_swap_finding, slot_finding
from glmcheck.checks.diagnosis_structure import (
    RATIO,
    ErrorField,
    Finding,
    describe_dims,
    element_finding,
    profile,
    ratio,
)
from glmcheck.checks.diagnosis_text import MAX_LINES  # noqa: F401  (the lines printed a row)
from glmcheck.checks.diagnosis_tokens import token_finding, trend_finding

STRUCTURES = ("heads", "tokens", "dims", "slots", "heads_swapped")
BIAS_SHARE = 0.1  # beside a structure, a bias is named when it explains this share of the error beyond the band
ORDER = ("call", "heads_swapped", "slots", "heads", "tokens", "dims", "scale", "temperature", "trend", "spread",
         "hidden")


def bias_findings(stats: dict, band: Band, exact: torch.Tensor, row: torch.Tensor, direction: torch.Tensor | None,
                  excess: float) -> list[Finding]:
    """The output scale and the softmax scale (temperature) the row's difference shows, when the gate finds either
    bias outside the band's window (its range widened by that range and BIAS_SIGMAS standard errors). Both are fitted
    together (the two directions are correlated: an output scale projects on the temperature direction too), each
    coefficient on the part of its direction the other does not span, and named when beyond BIAS_SIGMAS of its
    standard error, with the share of the row's `excess` error energy (over the band's mean) it explains."""
    outside = False
    for stat in BIAS_STATS:
        value, se = stats.get(stat), stats.get(f"{stat}_se", 0.0)
        if value is not None and math.isfinite(value) and stat in band.samples:
            low, _, high = band.summary(stat)
            widen = (high - low) + BIAS_SIGMAS * se
            outside |= not low - widen <= value <= high + widen
    if not outside or not excess > 0:
        return []
    e = exact.detach().double().flatten()
    d = row.detach().to(e.device, torch.float64).flatten() - e
    directions = {"scale": e}
    if direction is not None:
        directions["temperature"] = direction.detach().to(e.device, torch.float64).flatten()
    found = []
    for kind, x in directions.items():
        others = [y for k, y in directions.items() if k != kind]
        own = x - sum(((x @ y) / (y @ y)) * y for y in others) if others else x
        energy = float(own @ own)
        if energy == 0:
            continue
        value, se = float(d @ own) / energy, float((d * own).norm()) / energy
        if abs(value) <= BIAS_SIGMAS * se:
            continue
        share = value ** 2 * float(x @ x) / excess
        band_stat = "scale_bias" if kind == "scale" else "temperature_bias"
        low, _, high = band.summary(band_stat) if band_stat in band.samples else (math.nan, 0, math.nan)
        if kind == "scale":
            text = f"the output is scaled by 1 {value:+.2e} (+- {se:.1e})"
        else:
            text = f"the softmax scale is off by {100 * value:+.3f} % (temperature {value:+.2e} +- {se:.1e})"
        text += f": {min(share, 1):.0%} of the error beyond the band's (the band's {low:+.1e} to {high:+.1e})"
        found.append(Finding(kind, text, share, {"bias": value, "se": se, "band": [low, high], "explains": share}))
    return sorted(found, key=lambda f: -f.strength)


def spread_finding(field: ErrorField) -> Finding | None:
    """How evenly the error lies over heads, quarters of the tokens and output dims, for a row beyond the band."""
    total = field.total_ratio()
    if not total > RATIO:
        return None
    tokens = field.tokens()
    n = tokens.row.numel()
    quarters = [float(ratio(tokens.row[q * n // 4:(q + 1) * n // 4].sum(),
                            tokens.band[:, q * n // 4:(q + 1) * n // 4].sum(dim=1).max())) for q in range(4)] \
        if n >= 4 else [total]
    heads = field.heads().ratios().tolist()
    dims = field.output_dims().ratios()
    text = (f"no structure: {total:.3g}x the band overall, every head {min(heads):.3g}x to {max(heads):.3g}x, the "
            f"quarters of the prompt {min(quarters):.3g}x to {max(quarters):.3g}x, output dims "
            f"{float(dims.min()):.3g}x to {float(dims.max()):.3g}x")
    return Finding("spread", text, total, {"ratio": total, "heads": [min(heads), max(heads)],
                                          "quarters": quarters})


def diagnose(exact: torch.Tensor, row: torch.Tensor, band: list[torch.Tensor], *, call: LayerCall | None = None,
             stats: dict | None = None, band_stats: Band | None = None,
             direction: torch.Tensor | None = None) -> dict:
    """The findings for one row (module docstring): {"findings": [...], "profile": {"heads", "positions"}}.
    `exact` fp64 [T, H, D] (the call's exact output when `call` is given), `row` and `band` outputs of the same
    shape; `stats` the row's statistics and `band_stats` its Band for the biases, `direction` the exact output's
    derivative in the relative softmax scale."""
    field = ErrorField.of(exact, row, band)
    heads_axis, tokens_axis = field.heads(), field.tokens()
    findings: list[Finding] = []
    heads = element_finding(heads_axis, "heads", "heads") if heads_axis.row.numel() > 1 else None
    swap = head_swap_finding(exact, row, band, heads_axis) if heads_axis.row.numel() > 1 else None
    findings += [f for f in (heads, swap) if f is not None]
    tokens = token_finding(tokens_axis, call.indices if call else None, call.valid() if call else None)
    findings += [f for f in (tokens, describe_dims(field.output_dims())) if f is not None]
    if call is not None:
        slots = slot_finding(call, exact, row, tokens_axis)
        if slots is not None:
            findings.append(slots)
    if stats is not None and band_stats is not None:
        biases = bias_findings(stats, band_stats, exact, row, direction,
                               float(field.cells.sum() - field.band_cells.sum(dim=(1, 2)).mean()))
        structural = any(f.kind in STRUCTURES for f in findings)
        mechanism = any(f.kind in ("slots", "heads_swapped") for f in findings)
        findings += [b for b in biases if not structural or (b.strength >= BIAS_SHARE and not mechanism)]
    if tokens is None:
        trend = trend_finding(tokens_axis)
        if trend is not None:
            findings.append(trend)
    if not any(f.kind in STRUCTURES + ("scale", "temperature") for f in findings):
        spread = spread_finding(field)
        if spread is not None:
            findings.append(spread)
    findings.sort(key=lambda f: (ORDER.index(f.kind) if f.kind not in ("scale", "temperature") else
                                 ORDER.index("scale"), -f.strength))
    return {"findings": [f.as_dict() for f in findings],
            "profile": {"heads": profile(heads_axis), "positions": profile(tokens_axis)},
            "ratio": field.total_ratio()}


def hidden_finding(exact: torch.Tensor, row: torch.Tensor, band: list[torch.Tensor]) -> tuple[Finding | None, dict]:
    """The tokens that carry a hidden state's error (drift: [T, hidden] tensors), and its profile by position."""
    field = ErrorField.of(exact[:, None], row[:, None], [b[:, None] for b in band])
    found = token_finding(field.tokens())
    if found is not None:
        found.kind, found.text = "hidden", "hidden state: " + found.text
    return found, profile(field.tokens())
