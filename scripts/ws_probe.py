"""GPU probe of the split 64-row union tile (`glmcheck/kernels/union_ws.py`; the ping-pong tile
that replaced it as the default has scripts/pingpong_probe.py).

Usage (H200): PYTHONPATH=. python3 scripts/ws_probe.py [--seq-len 8192] [--configs 64/2,32/3,32/4]
For each (H, G) with G*H = 64: the union sets are built once; the Gluon kernel writes a poisoned
output, which must have no NaN left and pass the fp32-reference gate (rel-L2 <= GATE_REL_L2) and
sit as close to the Triton union kernel's output as two summation orders allow; only then is it
timed, next to the Triton union attention alone (its table tile) and the build alone.
"""

from __future__ import annotations

import argparse
import sys

import torch

from glmcheck import metrics
from glmcheck.bench import D_V, GATE_REL_L2, BenchPoint, make_inputs, time_ms
from glmcheck.inputs import poisoned_out
from glmcheck.kernels import tiles
from glmcheck.kernels.prefill import LOG2E, needs_int64_rows
from glmcheck.kernels.union import launch_union_attention, union_dedup
from glmcheck.kernels.union_ws_launch import WsConfig, launch_union_attention_ws
from glmcheck.kernels.validate import PrefillArgs
from glmcheck.reference import sparse_mla_reference

UNION_VS_UNION_REL_L2 = 2e-3  # as tests/test_union.py allows between union and per-token


def parse_configs(text: str) -> list[WsConfig]:
    configs = []
    for item in text.split(","):
        parts = [int(v) for v in item.split("/")]
        configs.append(WsConfig(*parts, tile="split"))
    return configs


def probe(seq_len: int, heads: int, configs: list[WsConfig]) -> bool:
    group = 64 // heads
    x = make_inputs(BenchPoint(1, seq_len, heads), seed=5)
    args = PrefillArgs(x.q, x.kv, x.indices, None, x.sm_scale, D_V)
    kv_int64 = needs_int64_rows(args.num_kv_rows, args.d_qk)
    scale = x.sm_scale * LOG2E
    sets = union_dedup(x.indices, group, num_kv_rows=args.num_kv_rows)
    tokens = sets.lengths.shape[0] * group
    ref = sparse_mla_reference(x.q[:tokens], x.kv, x.indices[:tokens], x.sm_scale, D_V, dtype=torch.float32)
    tile = tiles.table_tile("union", 64, x.q.device)
    triton_out = poisoned_out(x.q.shape[0], heads, D_V, "cuda")
    launch_union_attention(args, sets, triton_out, tile, kv_int64, scale)
    t_triton = time_ms(lambda: launch_union_attention(args, sets, triton_out, tile, kv_int64, scale))
    t_build = time_ms(lambda: union_dedup(x.indices, group, num_kv_rows=args.num_kv_rows))
    mean_len = sets.lengths.float().mean().item()
    print(f"1x{seq_len} H={heads} G={group}: mean union {mean_len:.0f} rows; build {t_build:.3f} ms; "
          f"triton union attention ({tile}) {t_triton:.3f} ms, rel {metrics.rel_l2(triton_out[:tokens], ref):.3e}",
          flush=True)
    ok = True
    for config in configs:
        out = poisoned_out(x.q.shape[0], heads, D_V, "cuda")
        try:
            launch_union_attention_ws(args, sets, out, scale, kv_int64, config)
            torch.cuda.synchronize()
        except Exception as error:  # a config the compiler refuses (e.g. shared memory): report, go on
            print(f"  ws {config}: failed to run: {type(error).__name__}: {str(error)[:300]}", flush=True)
            ok = False
            continue
        nan = int(out[:tokens].isnan().sum())
        rel = metrics.rel_l2(out[:tokens], ref)
        vs_triton = metrics.rel_l2(out[:tokens], triton_out[:tokens])
        good = nan == 0 and rel <= GATE_REL_L2 and vs_triton <= UNION_VS_UNION_REL_L2
        ms = (time_ms(lambda o=out, c=config: launch_union_attention_ws(args, sets, o, scale, kv_int64, c))
              if good else float("nan"))
        rows = mean_len * sets.lengths.shape[0]
        print(f"  ws {config}: NaN {nan}, rel {rel:.3e}, vs triton {vs_triton:.2e} -> {ms:.3f} ms "
              f"({t_triton / ms:.2f}x triton; {ms * 1e6 / rows:.3f} ns per union row)", flush=True)
        ok = ok and good
    return ok


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seq-len", type=int, nargs="+", default=[2048, 8192])
    parser.add_argument("--heads", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--configs", default="64/2,32/3,32/4")
    ns = parser.parse_args()
    configs = parse_configs(ns.configs)
    ok = True
    for seq_len in ns.seq_len:
        for heads in ns.heads:
            ok = probe(seq_len, heads, configs) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
