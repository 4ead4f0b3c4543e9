"""GPU probe of the ping-pong 64-row tile (`glmcheck/kernels/union_pingpong.py`) against the split
tile (`union_ws.py`); `WsConfig.tile_for` picks one of the two per union group.

Usage (H200): PYTHONPATH=. python3 scripts/pingpong_probe.py [--seq-len 2048 8192] [--heads 8 16 32 64]
For each (H, G = 64 / H) the sets are built once (union sets, or each token's own rows at H = 64).
Each tile writes a poisoned output, which must be NaN-free, pass the fp32-reference gate
(rel-L2 <= GATE_REL_L2) and sit within two summation orders of the other tile. Then the same
on cut lengths (0, 1, 63-65, 127-129 rows: empty groups, partial and odd block counts), against
the split tile. Only then are both timed, side by side.
"""

from __future__ import annotations

import argparse

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
SPLIT, PINGPONG = WsConfig(tile="split"), WsConfig(tile="pingpong")


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


def probe(seq_len: int, heads: int, variants: list[WsConfig]) -> bool:
    """Gate both tiles, then time them; False when a gate fails."""
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
    outs = {}
    for config in (SPLIT, PINGPONG):
        out = run_tile(args, sets, scale, kv_int64, config)[:tokens]
        nan, rel = int(out.isnan().sum()), metrics.rel_l2(out, reference)
        print(f"{label} {config.tile}: NaN {nan}, rel-L2 vs fp32 {rel:.3e}", flush=True)
        if nan or not rel <= GATE_REL_L2:
            print(f"{label}: gate failed; nothing timed", flush=True)
            return False
        outs[config.tile] = out
    between = metrics.rel_l2(outs["pingpong"], outs["split"])
    short = cut_sets(sets)
    short_split = run_tile(args, short, scale, kv_int64, SPLIT)[:tokens]
    short_pingpong = run_tile(args, short, scale, kv_int64, PINGPONG)[:tokens]
    short_nan = int(short_pingpong.isnan().sum())
    short_between = metrics.rel_l2(short_pingpong, short_split)
    empty = short.lengths == 0
    empty_rows = short_pingpong.view(-1, group, heads, D_V)[empty]
    empty_ok = bool((empty_rows == 0).all())
    print(f"{label}: pingpong vs split {between:.2e}; cut lengths: NaN {short_nan}, vs split {short_between:.2e}, "
          f"empty groups all zero {empty_ok}", flush=True)
    if between > TILES_VS_EACH_OTHER_REL_L2 or short_nan or short_between > TILES_VS_EACH_OTHER_REL_L2 or not empty_ok:
        print(f"{label}: the tiles disagree; nothing timed", flush=True)
        return False
    rows = int(sets.lengths.sum())
    times = {config.tile: time_ms(lambda c=config: launch_union_attention_ws(args, sets, outs[c.tile], scale,
                                                                             kv_int64, c))
             for config in (SPLIT, PINGPONG)}
    cells = [f"{tile} {ms:.3f} ms ({ms * 1e6 / rows:.3f} ns/row)" for tile, ms in times.items()]
    print(f"{label}, {rows} rows: " + "; ".join(cells) + f"; pingpong {times['split'] / times['pingpong']:.2f}x split",
          flush=True)
    for variant in variants:
        out = run_tile(args, sets, scale, kv_int64, variant)[:tokens]
        rel = metrics.rel_l2(out, reference)
        if not rel <= GATE_REL_L2:
            print(f"  {variant}: gate failed (rel-L2 {rel:.3e})", flush=True)
            continue
        ms = time_ms(lambda v=variant, o=out: launch_union_attention_ws(args, sets, o, scale, kv_int64, v))
        print(f"  {variant}: {ms:.3f} ms ({ms * 1e6 / rows:.3f} ns/row; rel-L2 {rel:.2e})", flush=True)
    return True


def parse_variant(text: str) -> WsConfig:
    """"key=int,key=int" -> a ping-pong WsConfig with those fields."""
    fields = {key: int(value) for key, value in (item.split("=") for item in text.split(","))}
    return WsConfig(tile="pingpong", **fields)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seq-len", type=int, nargs="+", default=[2048, 8192])
    parser.add_argument("--heads", type=int, nargs="+", default=[8, 16, 32, 64])
    parser.add_argument("--variant", action="append", default=[],
                        help="extra ping-pong configs to time, e.g. consumer_regs=232 (repeatable)")
    ns = parser.parse_args()
    variants = [parse_variant(text) for text in ns.variant]
    ok = True
    for seq_len in ns.seq_len:
        for heads in ns.heads:
            ok = probe(seq_len, heads, variants) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
