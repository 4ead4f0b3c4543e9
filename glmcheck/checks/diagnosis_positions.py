"""Where a logits or sweep row leaves the band, and whether its layer 0 fails too.

`beyond_summary(kl, allowed)`: the positions the all-position gate counts beyond the band (`position_gate`: KL above
its allowed level there), the first, the densest runs of consecutive ones, and a period t = c mod G (G = 2 ..
MAX_PERIOD) when one residue holds at least half of them and at least LIFT times its share of the positions.

`layer0_probe(...)`: the row's kernel on the exact reference's own layer-0 call of the same prompt (the forward stops
after layer 0), judged by layer0's gate beside the band's ideal kernels on that call (`diagnosis_calls.check_call`):
layer 0 fails too (the kernel is wrong there; `glmcheck layer0` shows it), or it passes (the error enters later;
`glmcheck drift` shows where).
"""

from __future__ import annotations

import torch

from glmcheck.backends.registry import get_backend
from glmcheck.checks.band import DEFAULT_BAND, FAIL, Gate
from glmcheck.checks.diagnosis_calls import check_call, record_calls
from glmcheck.checks.diagnosis_structure import MAX_PERIOD

RUNS = 3  # densest runs named
LIFT = 2.0  # a period's residue must hold this many times its share of the positions


def _runs(beyond: torch.Tensor) -> list[list[int]]:
    """[[first, last], ...] of the runs of consecutive True, longest first (then earliest)."""
    flags = beyond.tolist()
    runs, start = [], None
    for i, flag in enumerate(flags + [False]):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            runs.append([start, i - 1])
            start = None
    return sorted(runs, key=lambda r: (-(r[1] - r[0]), r[0]))


def _period(beyond: torch.Tensor) -> list[int] | None:
    """[G, c, count]: the residue t = c mod G holding the most of the positions beyond over their share (module
    docstring), None when none qualifies."""
    where = beyond.nonzero().flatten()
    n, total = where.numel(), beyond.numel()
    best = None
    for g in range(2, min(MAX_PERIOD, total // 2) + 1):
        counts = torch.bincount(where % g, minlength=g)
        c = int(counts.argmax())
        count = int(counts[c])
        share = count / n if n else 0.0
        lift = share * g
        if count >= 3 and share >= 0.5 and lift >= LIFT and (best is None or lift > best[0] + 1e-9):
            best = (lift, [g, c, count])
    return best[1] if best else None


def beyond_summary(kl: torch.Tensor, allowed: torch.Tensor) -> dict:
    """The positions beyond the band (module docstring): {"beyond", "positions", "first", "runs", "period"}."""
    beyond = ~(kl.double() <= allowed.double())  # NaN counts beyond, as the gate counts it
    where = beyond.nonzero().flatten()
    return {"beyond": int(where.numel()), "positions": int(beyond.numel()),
            "first": int(where[0]) if where.numel() else None, "runs": _runs(beyond)[:RUNS],
            "period": _period(beyond)}


def summary_text(summary: dict) -> str:
    """The positions beyond the band in words."""
    if not summary["beyond"]:
        return "no position beyond the band"
    runs = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in summary["runs"])
    text = (f"{summary['beyond']} of {summary['positions']} positions beyond the band, the first at "
            f"{summary['first']}; the longest runs {runs}")
    if summary["period"]:
        g, c, count = summary["period"]
        text += f"; t = {c} mod {g} holds {count} of them"
    return text


def layer0_probe(model: torch.nn.Module, input_ids: torch.Tensor, backends: list[str], exact: str, options, *,
                 band_size: int = DEFAULT_BAND, gate: Gate = Gate()) -> dict[str, dict]:
    """{backend: {"verdict", "rel_l2", "margin", "note"}} of each backend's kernel on the exact reference's layer-0
    call of `input_ids` (module docstring); {} when the call could not be recorded."""
    calls = record_calls(model, input_ids, exact, options, layers=1)
    if not calls:
        return {}
    out = {}
    for name in backends:
        kernel = get_backend(name, deterministic=options.deterministic, kv_cache_dtype=options.kv_cache_dtype)
        try:
            row = check_call(calls[0], kernel, band_size=band_size, gate=gate, kv_cache_dtype=options.kv_cache_dtype,
                             label=name).row
        except Exception as err:  # noqa: BLE001 - a kernel that raises on its own layer-0 call: that is the finding
            out[name] = {"verdict": FAIL, "rel_l2": None, "margin": None, "note": f"raised {type(err).__name__}"}
            continue
        out[name] = {"verdict": row.verdict, "rel_l2": row.rel_l2, "margin": row.extra.get("margin"),
                     "note": row.note}
    return out


def probe_text(probe: dict) -> str:
    """Layer 0's verdict in words."""
    if probe["verdict"] == FAIL:
        size = f" (rel-L2 {probe['rel_l2']:.3e}, {probe['margin']:.3g}x its limit)" if probe.get("rel_l2") else ""
        return f"layer 0 FAILS too{size}"
    return f"layer 0 is {probe['verdict']} alone ({probe.get('margin') or 0:.2g}x its limit): the error enters later"
