"""GPU probe of the ping-pong 64-row tile (`glmcheck/kernels/union_pingpong.py`) against the split
tile (`union_ws.py`); `WsConfig.tile_for` picks one of the two per union group.

Usage (H200): PYTHONPATH=. python3 scripts/pingpong_probe.py [--seq-len 2048 8192] [--heads 8 16 32 64]
For each (H, G = 64 / H) the sets are built once (union sets, or each token's own rows at H = 64).
The split tile writes a poisoned output, which must be NaN-free and pass the fp32-reference gate
(rel-L2 <= GATE_REL_L2). Then the ping-pong tile, with the default config and with each
--variant ("field=int,...": e.g. consumer_regs=232), must do the same and sit within
two summation orders of the split tile, on the whole sets and on cut lengths (0, 1, 63-65,
127-129 rows: empty groups, which must be exactly zero, partial and odd block counts). Only the
configs that pass are timed, side by side with the split tile.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch

from glmcheck import metrics
from glmcheck.bench import D_V, GATE_REL_L2, BenchPoint, make_inputs, time_ms
from glmcheck.inputs import poisoned_out
from glmcheck.kernels.prefill import LOG2E, needs_int64_rows
from glmcheck.kernels.union import UnionSets, token_row_sets, union_dedup
from glmcheck.kernels.union_ws_launch import WsConfig, launch_union_attention_ws
from glmcheck.kernels.validate import PrefillArgs
from glmcheck.reference import sparse_mla_reference

TILES_VS_EACH_OTHER_REL_L2 = 2e-3  # two summation orders, as tests/test_union.py allows
CUT_LENGTHS = (0, 1, 63, 64, 65, 127, 128, 129)
SPLIT, PINGPONG, DEFAULT = WsConfig(tile="split"), WsConfig(tile="pingpong"), WsConfig()


def run_tile(args: PrefillArgs, sets: UnionSets, scale: float, kv_int64: bool, config: WsConfig) -> torch.Tensor:
    out = poisoned_out(args.q.shape[0], args.num_heads, D_V, "cuda")
    launch_union_attention_ws(args, sets, out, scale, kv_int64, config)
    torch.cuda.synchronize()
    return out


def cut_sets(sets: UnionSets) -> UnionSets:
    """The same sets with group g cut to CUT_LENGTHS[g % 8] rows (never longer than it was)."""
    cuts = torch.tensor(CUT_LENGTHS, dtype=sets.lengths.dtype, device=sets.lengths.device)
    cut = cuts.repeat(sets.lengths.shape[0] // len(CUT_LENGTHS) + 1)[: sets.lengths.shape[0]]
    return UnionSets(rows=sets.rows, bits=sets.bits, lengths=torch.minimum(sets.lengths, cut), group=sets.group)


@dataclass
class ProbeSets:
    """One point's inputs, its sets whole and cut, and what every ping-pong config is checked against."""

    label: str
    args: PrefillArgs
    sets: UnionSets
    short: UnionSets
    kv_int64: bool
    scale: float
    tokens: int
    reference: torch.Tensor  # fp32, [tokens, H, D_V]
    split: torch.Tensor  # the split tile's output on the whole sets
    short_split: torch.Tensor  # and on the cut sets


def describe(config: WsConfig) -> str:
    """The tile and the fields that differ from WsConfig()'s, e.g. "pingpong consumer_regs=232"."""
    changed = [f"{field.name}={getattr(config, field.name)}" for field in dataclasses.fields(config)
               if field.name != "tile" and getattr(config, field.name) != getattr(DEFAULT, field.name)]
    return " ".join([config.tile, *changed])


def check_pingpong(point: ProbeSets, config: WsConfig) -> torch.Tensor | None:
    """The ping-pong tile under `config` on the whole and the cut sets: NaN-free, within the
    reference gate, within two summation orders of the split tile, empty groups exactly zero.
    Its whole-set output when all hold, else None (the failure printed)."""
    out = run_tile(point.args, point.sets, point.scale, point.kv_int64, config)[:point.tokens]
    nan, rel = int(out.isnan().sum()), metrics.rel_l2(out, point.reference)
    between = metrics.rel_l2(out, point.split)
    short = run_tile(point.args, point.short, point.scale, point.kv_int64, config)[:point.tokens]
    short_nan, short_between = int(short.isnan().sum()), metrics.rel_l2(short, point.short_split)
    group, heads = point.sets.group, point.args.num_heads
    empty_ok = bool((short.view(-1, group, heads, D_V)[point.short.lengths == 0] == 0).all())
    print(f"{point.label} {describe(config)}: NaN {nan}, rel-L2 vs fp32 {rel:.3e}, vs split {between:.2e}; cut lengths: "
          f"NaN {short_nan}, vs split {short_between:.2e}, empty groups all zero {empty_ok}", flush=True)
    if (nan or not rel <= GATE_REL_L2 or not between <= TILES_VS_EACH_OTHER_REL_L2 or short_nan
            or not short_between <= TILES_VS_EACH_OTHER_REL_L2 or not empty_ok):
        print(f"{point.label} {describe(config)}: a check failed; not timed", flush=True)
        return None
    return out


def probe_sets(seq_len: int, heads: int) -> ProbeSets | None:
    """The point's sets and the split tile's outputs (None when the split tile fails its gate)."""
    group = 64 // heads
    x = make_inputs(BenchPoint(1, seq_len, heads), seed=13)
    args = PrefillArgs(x.q, x.kv, x.indices, None, x.sm_scale, D_V)
    kv_int64 = needs_int64_rows(args.num_kv_rows, args.d_qk)
    scale = x.sm_scale * LOG2E
    sets = (token_row_sets(x.indices, None, args.num_kv_rows) if group == 1
            else union_dedup(x.indices, group, num_kv_rows=args.num_kv_rows))
    tokens = sets.lengths.shape[0] * group
    reference = sparse_mla_reference(x.q[:tokens], x.kv, x.indices[:tokens], x.sm_scale, D_V, dtype=torch.float32)
    label = f"1x{seq_len} H={heads} G={group}"
    split = run_tile(args, sets, scale, kv_int64, SPLIT)[:tokens]
    nan, rel = int(split.isnan().sum()), metrics.rel_l2(split, reference)
    print(f"{label} split: NaN {nan}, rel-L2 vs fp32 {rel:.3e}", flush=True)
    if nan or not rel <= GATE_REL_L2:
        print(f"{label}: the split tile failed its gate; nothing timed", flush=True)
        return None
    short = cut_sets(sets)
    short_split = run_tile(args, short, scale, kv_int64, SPLIT)[:tokens]
    return ProbeSets(label, args, sets, short, kv_int64, scale, tokens, reference, split, short_split)


def probe(seq_len: int, heads: int, variants: list[WsConfig]) -> bool:
    """Gate the split tile, the ping-pong tile and each variant, then time those that passed, side
    by side; False when a gate fails."""
    point = probe_sets(seq_len, heads)
    if point is None:
        return False
    passed = {config: check_pingpong(point, config) for config in (PINGPONG, *variants)}
    rows = int(point.sets.lengths.sum())
    timed = {SPLIT: point.split, **{config: out for config, out in passed.items() if out is not None}}
    times = {config: time_ms(lambda c=config, o=out: launch_union_attention_ws(point.args, point.sets, o, point.scale,
                                                                               point.kv_int64, c))
             for config, out in timed.items()}
    print(f"{point.label}, {rows} rows: split {times[SPLIT]:.3f} ms ({times[SPLIT] * 1e6 / rows:.3f} ns/row)",
          flush=True)
    for config, ms in times.items():
        if config is not SPLIT:
            print(f"  {describe(config)}: {ms:.3f} ms ({ms * 1e6 / rows:.3f} ns/row), {times[SPLIT] / ms:.2f}x split",
                  flush=True)
    return all(out is not None for out in passed.values())


def parse_variant(text: str) -> WsConfig:
    """"key=int,key=int" -> a ping-pong WsConfig with those fields (0/1 for the bool ones);
    ArgumentTypeError naming what is wrong."""
    names = {field.name for field in dataclasses.fields(WsConfig)} - {"tile"}
    fields: dict[str, int | bool] = {}
    for item in text.split(","):
        key, _, value = item.partition("=")
        if key not in names or not value.lstrip("-").isdigit():
            raise argparse.ArgumentTypeError(f"--variant takes field=int pairs with fields from {sorted(names)}, "
                                             f"got {item!r}")
        fields[key] = bool(int(value)) if isinstance(getattr(DEFAULT, key), bool) else int(value)
    return WsConfig(tile="pingpong", **fields)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seq-len", type=int, nargs="+", default=[2048, 8192])
    parser.add_argument("--heads", type=int, nargs="+", default=[8, 16, 32, 64])
    parser.add_argument("--variant", action="append", default=[], type=parse_variant,
                        help="extra ping-pong configs to check and time, e.g. consumer_regs=232 "
                             "(repeatable)")
    ns = parser.parse_args()
    return run_points(ns.seq_len, ns.heads, lambda seq_len, heads: probe(seq_len, heads, ns.variant))


def run_points(seq_lens: list[int], heads: list[int], check: Callable[[int, int], bool]) -> int:
    """check(seq_len, heads) at every point (each one runs even when an earlier one failed); the
    exit status: 0 when every point passed, else 1."""
    results = [check(seq_len, h) for seq_len in seq_lens for h in heads]
    return 0 if all(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
