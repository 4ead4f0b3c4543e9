"""What a failing token's output is, when not the exact attention over its slots: slot-level attribution.

For a few of the tokens beyond the band (the SAMPLE of largest excess), the exact reference (fp64) is rerun on that
token with its selection changed one way at a time, and the row's output is compared with each: a change whose
exact output the row matches (its rel-L2 to it within RATIO x the band's largest rel-L2 at that token) explains the
token. The changes (`HYPOTHESES`, the simpler first):

- drops a row: its last valid slot, its first, slot j, every slot j = c mod G, the rows >= R, the rows < R, the
  rows w or more positions behind it, the rows fewer than w behind it;
- reads a wrong row: row 0 in an empty slot, row t + 1 (a future row) in an empty slot or in place of its last,
  its first row again in place of its last, its neighbour's (t + 1 or t - 1) selection, each row r >= R as r - R,
  every row its group of G tokens selects (a union path that ignores which token owns a row);
- computes the scores wrong: without the rope part of q.k, without the latent part, or without one aligned block of
  q's dims (2^k of them, 8 <= 2^k <= d_qk / 2).

A change explains the row when it explains at least EXPLAINS of the sampled tokens (thresholds R, w: one range of
them common to those tokens). `head_swap_finding` does the same for heads: a head beyond the band whose output is
another head's exact output.
"""

from __future__ import annotations

import math

import torch

from glmcheck.backends.reference import sparse_mla_reference
from glmcheck.checks.diagnosis_calls import LayerCall
from glmcheck.checks.diagnosis_structure import RATIO, Axis, Finding

SAMPLE = 8  # failing tokens tried
EXPLAINS = 0.75  # the share of them a change must explain
THRESHOLDS = 48  # at most this many thresholds R or w a token (evenly through its own)

# family -> (words, what the kernel does); the order is the preference among changes that explain as many tokens
HYPOTHESES = {
    "last": ("drops its last valid slot", "drops a row"),
    "first": ("drops its first valid slot", "drops a row"),
    "slot": ("drops slot {0}", "drops a row"),
    "every": ("drops every slot j = {1} mod {0}", "drops rows"),
    "rows_from": ("drops the rows >= R (R in {0}..{1})", "drops rows"),
    "rows_below": ("drops the rows < R (R in {0}..{1})", "drops rows"),
    "far": ("drops the rows w or more positions behind the token (w in {0}..{1})", "drops rows"),
    "near": ("drops the rows fewer than w positions behind the token (w in {0}..{1})", "drops rows"),
    "row0": ("reads row 0 in an empty slot", "reads a wrong row"),
    "future_empty": ("reads row t + 1 (a future row) in an empty slot", "reads a wrong row"),
    "future_last": ("reads row t + 1 (a future row) in place of its last slot", "reads a wrong row"),
    "first_twice": ("reads its first row again in place of its last", "reads a wrong row"),
    "neighbour": ("attends over token t{0:+d}'s selection", "reads wrong rows"),
    "wrap": ("reads each row r >= {0} as row r - {0} (an offset that wraps at {0})", "reads wrong rows"),
    "group_union": ("attends over every row its group of {0} tokens (t // {0}) selects", "reads other tokens' rows"),
    "rope": ("is scored without the rope part of q.k", "computes the scores wrong"),
    "nope": ("is scored without the latent part of q.k", "computes the scores wrong"),
    "qdims": ("is scored without q's dims {0}..{1} (of {2})", "computes the scores wrong"),
}
INTERVALS = ("rows_from", "rows_below", "far", "near")


def _thresholds(values: torch.Tensor) -> list[int]:
    distinct = sorted(set(values.tolist()))
    if len(distinct) > THRESHOLDS:
        distinct = [distinct[round(i * (len(distinct) - 1) / (THRESHOLDS - 1))] for i in range(THRESHOLDS)]
    return distinct


def _changes(call: LayerCall, valid: torch.Tensor, t: int) -> list[tuple[str, tuple, torch.Tensor, tuple]]:
    """(family, parameter, indices [K] (a group's union: wider), q's dims zeroed (start, stop) or ()) of every change
    tried for token t."""
    num_rows = call.kv.shape[0]
    base = torch.where(valid[t], call.indices[t], -1).cpu()
    slots = valid[t].cpu().nonzero().flatten()
    out: list[tuple[str, tuple, torch.Tensor, tuple]] = []
    if slots.numel() == 0:
        return out

    def with_slots(family: str, param: tuple, drop=None, put=None, q: tuple = ()) -> None:
        changed = base.clone()
        if drop is not None:
            changed[drop] = -1
        if put is not None:
            changed[put[0]] = put[1]
        if q or not torch.equal(changed, base):
            out.append((family, param, changed, q))

    rows = base[slots]
    distance = t - rows
    with_slots("last", (), drop=slots[-1:])
    if slots.numel() > 1:
        with_slots("first", (), drop=slots[:1])
    picks = slots if slots.numel() <= THRESHOLDS else slots[torch.linspace(0, slots.numel() - 1, THRESHOLDS).long()]
    for j in picks.tolist():
        with_slots("slot", (j,), drop=torch.tensor([j]))
    for g in (2, 3, 4, 8):
        for c in range(g):
            hit = slots[slots % g == c]
            if 0 < hit.numel() < slots.numel():
                with_slots("every", (g, c), drop=hit)
    for r in _thresholds(rows):
        with_slots("rows_from", (r,), drop=slots[rows >= r])
        with_slots("rows_below", (r,), drop=slots[rows < r])
    for w in _thresholds(distance):
        with_slots("far", (w,), drop=slots[distance >= w])
        with_slots("near", (w,), drop=slots[distance < w])
    empty = (~valid[t].cpu()).nonzero().flatten()
    if empty.numel():
        with_slots("row0", (), put=(empty[0], 0))
        if t + 1 < num_rows:
            with_slots("future_empty", (), put=(empty[0], t + 1))
    if t + 1 < num_rows:
        with_slots("future_last", (), put=(slots[-1], t + 1))
    if slots.numel() > 1:
        with_slots("first_twice", (), put=(slots[-1], int(rows[0])))
    for step in (1, -1):
        if 0 <= t + step < call.tokens:
            other = torch.where(valid[t + step], call.indices[t + step], -1).cpu()
            if not torch.equal(other, base):
                out.append(("neighbour", (step,), other, ()))
    for e in range(1, int(math.log2(max(num_rows, 2))) + 1):
        wrap = 2 ** e
        if bool((rows >= wrap).any()):
            changed = base.clone()
            changed[slots] = torch.where(rows >= wrap, rows - wrap, rows)
            out.append(("wrap", (wrap,), changed, ()))
    for g in (2, 4, 8):
        members = torch.arange(t // g * g, min(t // g * g + g, call.tokens))
        union = torch.unique(torch.where(valid[members], call.indices[members], -1).cpu())
        union = union[union >= 0].to(base.dtype)
        if members.numel() > 1 and union.numel() > rows.numel():
            out.append(("group_union", (g,), union, ()))
    d_qk = call.q.shape[-1]
    with_slots("rope", (), q=(call.d_v, d_qk))
    with_slots("nope", (), q=(0, call.d_v))
    size = 8
    while size <= d_qk // 2:
        for start in range(0, d_qk - size + 1, size):
            if (start, start + size) not in ((call.d_v, d_qk), (0, call.d_v)):
                with_slots("qdims", (start, start + size - 1, d_qk), q=(start, start + size))
        size *= 2
    return out


def _explained_tokens(call: LayerCall, exact: torch.Tensor, row: torch.Tensor, band_rel: torch.Tensor,
                      tokens: list[int]) -> dict[tuple[str, tuple], set[int]]:
    """{(family, parameter): the sampled tokens that change explains}."""
    valid = call.valid()
    batch_q, batch_i, keys = [], [], []
    for t in tokens:
        for family, param, changed, q_change in _changes(call, valid, t):
            q = call.q[t].clone()
            if q_change:
                q[:, q_change[0]:q_change[1]] = 0
            batch_q.append(q)
            batch_i.append(changed.to(torch.int32))
            keys.append((family, param, t))
    if not keys:
        return {}
    device = call.q.device
    width = max(i.numel() for i in batch_i)  # a group's union is wider than one token's selection
    indices = torch.stack([torch.nn.functional.pad(i, (0, width - i.numel()), value=-1) for i in batch_i])
    outputs = sparse_mla_reference(torch.stack(batch_q), call.kv, indices.to(device), call.sm_scale, call.d_v,
                                   dtype=torch.float64)
    mine = row.detach().to(device, torch.float64)[[k[2] for k in keys]]
    norms = exact[[k[2] for k in keys]].flatten(1).norm(dim=1)
    residual = ((mine - outputs).flatten(1).norm(dim=1) / norms.clamp_min(1e-300)).cpu()
    explained: dict[tuple[str, tuple], set[int]] = {}
    for (family, param, t), value in zip(keys, residual.tolist()):
        if value <= RATIO * float(band_rel[t]):
            explained.setdefault((family, param), set()).add(t)
    return explained


def _best_interval(family: str, explained: dict, call: LayerCall, tokens: list[int]) -> tuple[int, tuple] | None:
    """(tokens explained, (low, high)): the range of thresholds common to the most sampled tokens, each token's
    explaining thresholds widened to the gap below them among its own thresholds."""
    valid = call.valid()
    spans: dict[int, list[tuple[int, int]]] = {}
    for (fam, param), hit in explained.items():
        if fam != family:
            continue
        for t in hit:
            values = torch.where(valid[t], call.indices[t], -1).cpu()
            values = values[values >= 0]
            own = sorted(set((values if family.startswith("rows") else t - values).tolist()))
            below = [v for v in own if v < param[0]]
            spans.setdefault(t, []).append((below[-1] + 1 if below else 0, param[0]))
    if not spans:
        return None
    points = sorted({p for s in spans.values() for lo, hi in s for p in (lo, hi)})
    best = None
    for p in points:
        count = sum(any(lo <= p <= hi for lo, hi in s) for s in spans.values())
        if best is None or count > best[0]:
            best = (count, p)
    count, point = best
    holders = [s for s in spans.values() if any(lo <= point <= hi for lo, hi in s)]
    low = max(max(lo for lo, hi in s if lo <= point <= hi) for s in holders)
    high = min(min(hi for lo, hi in s if lo <= point <= hi) for s in holders)
    return count, (low, high)


def slot_finding(call: LayerCall, exact: torch.Tensor, row: torch.Tensor, tokens_axis: Axis,
                 sample: int = SAMPLE) -> Finding | None:
    """The change of a token's selection (or scores) that explains the sampled failing tokens (module docstring);
    None when no change explains EXPLAINS of them. `exact` fp64 and `row` [T, H, d_v] on the call's device,
    `tokens_axis` the per-token error energies (`ErrorField.tokens`)."""
    ratios = tokens_axis.ratios()
    order = tokens_axis.excess().argsort(descending=True).tolist()
    tokens = [t for t in order if ratios[t] > RATIO][:sample]
    if not tokens:
        return None
    band_rel = (tokens_axis.band.max(dim=0).values / exact.flatten(1).pow(2).sum(dim=1).cpu().clamp_min(1e-300)).sqrt()
    typical = band_rel[band_rel > 0].median() if bool((band_rel > 0).any()) else torch.tensor(0.0)
    band_rel = band_rel.clamp_min(float(typical))  # a token every kernel gets exactly (one row) allows the typical
    explained = _explained_tokens(call, exact, row, band_rel, tokens)
    need = max(1, math.ceil(EXPLAINS * len(tokens)))
    best = None
    for family in HYPOTHESES:
        if family in INTERVALS:
            found = _best_interval(family, explained, call, tokens)
            options = [(found[0], found[1])] if found else []
        else:
            options = [(len(hit), param) for (fam, param), hit in explained.items() if fam == family]
        for count, param in options:
            if count >= need and (best is None or count > best[0]):
                best = (count, family, param)
    if best is None:
        return None
    count, family, param = best
    words, effect = HYPOTHESES[family]
    text = (f"slots: {count} of {len(tokens)} failing tokens tried equal the exact attention when the token "
            f"{words.format(*param)}: {effect}")
    return Finding("slots", text, count / len(tokens) * 1e6,
                   {"change": family, "param": list(param), "explained": count, "tried": len(tokens),
                    "effect": effect})


def head_swap_finding(exact: torch.Tensor, row: torch.Tensor, band: list[torch.Tensor],
                      heads_axis: Axis) -> Finding | None:
    """Heads beyond the band each holding another head's exact output (within RATIO x the band there)."""
    beyond = (heads_axis.ratios() > RATIO).nonzero().flatten().tolist()
    if not beyond:
        return None
    e = exact.double()
    a = row.detach().to(e.device, torch.float64)
    e_sq = e.pow(2).sum(dim=(0, 2))
    cross = torch.einsum("thd,tgd->hg", a, e)
    distance = (a.pow(2).sum(dim=(0, 2))[:, None] + e_sq[None, :] - 2 * cross).clamp_min(0).sqrt() / \
        e_sq.sqrt().clamp_min(1e-300)[None, :]
    band_rel = torch.stack([(b.detach().to(e.device, torch.float64) - e).pow(2).sum(dim=(0, 2)) for b in band]) \
        .max(dim=0).values.sqrt() / e_sq.sqrt().clamp_min(1e-300)
    pairs = {}
    for h in beyond:
        g = int(distance[h].argmin())
        if g == h or float(distance[h, g]) > RATIO * float(band_rel[g]):
            return None
        pairs[h] = g
    listed = ", ".join(f"head {h} holds head {g}'s" for h, g in pairs.items())
    text = f"heads: {listed} exact output (written to another head's place)"
    return Finding("heads_swapped", text, 2e6, {"pairs": {str(h): g for h, g in pairs.items()}})
