"""The engine-shaped calls' part of a check's output (`--calls serving`): which shapes ran, and per row whether its
outputs equal its own one-shot call's bit for bit, with the time each shape took (the record's facts
`engine_calls`, `glmcheck.model.engine_calls.EngineCalls.summary`)."""

from __future__ import annotations

from glmcheck.records.tables import Table, fmt_sci


def _shape_line(ran: list[dict]) -> str:
    """The shapes that ran, prompts of one shape together."""
    shapes: dict[tuple, list[int]] = {}
    for r in ran:
        shapes.setdefault((r["chunk"], r["pool_rows"], r["pool_elements"], r["requests"]), []).append(r["tokens"])
    text = "; ".join(f"{', '.join(map(str, tokens))} tokens in chunks of {chunk}, a pool of {rows:,} rows "
                     f"({elements:,} elements), {requests} requests a call"
                     for (chunk, rows, elements, requests), tokens in shapes.items())
    return (f"engine-shaped calls (--calls serving): {text or 'none ran'}; pages of 64 rows shuffled in the pool, "
            f"topk_length given with stale slots past it; every row judged on these calls (hf_* rows: transformers' "
            f"own attention, not swapped)")


def _equal_cell(tally: dict) -> str:
    layers, equal = tally["layers"], tally["equal"]
    if not layers:
        return "not compared (may run in Triton's interpreter)"
    return f"yes ({equal}/{layers})" if equal == layers else f"no ({equal}/{layers} equal)"


def engine_call_parts(facts: dict) -> list[str | Table]:
    """The shape line and one line per backend that ran engine-shaped (none without `engine_calls` in `facts`)."""
    calls = facts.get("engine_calls")
    if not isinstance(calls, dict):
        return []
    rows = []
    for name, tally in calls.get("backends", {}).items():
        gap = "-" if tally["equal"] == tally["layers"] else fmt_sci(tally["max_abs"])
        one_shot = f"{tally['one_shot_seconds']:.3f}" if tally["layers"] else "-"
        rows.append([name, str(tally["engine_calls"]), _equal_cell(tally), gap, f"{tally['engine_seconds']:.3f}",
                     one_shot])
    headers = ["backend", "engine calls", "= one-shot bit for bit (layer calls)", "max |diff|", "engine s",
               "one-shot s"]
    return [_shape_line(calls.get("ran", [])),
            Table(headers, rows, {"= one-shot bit for bit (layer calls)": "= one-shot"}, optional=("one-shot s",),
                  legend="= one-shot: the row's outputs equal its own one-shot call's on the same inputs, bit for bit; "
                         "engine s / one-shot s: the time in each shape")]
