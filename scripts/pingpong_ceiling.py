"""GPU diagnostic: how fast the ping-pong tile's producer and its consumers each run alone.

Usage (H200): PYTHONPATH=. python3 scripts/pingpong_ceiling.py [--seq-len 8192] [--heads 64 8]
    [--variant field=int,...] (a ping-pong WsConfig as pingpong_probe.py takes it; default the default)
For each point the split tile and the ping-pong tile pass `pingpong_probe`'s gates first (fp32
reference, the tiles against each other, cut lengths, empty groups). Then three launches of the
same kernel are timed side by side (`union_pingpong.py`, DIAG):
  kernel        the tile as it runs in every path;
  gather only   the consumers only wait for the pieces they release and release them, so the time
                is the producer's gathers with two stages and nothing else on the cycle; its output
                must be the zero tile on every row (the protocol ran to the end);
  compute only  the producer gathers each group's first pair and then only arrives, so every later
                pair computes on those real rows and the time is the consumers' own pace; its
                output must be finite on every row (nothing left poisoned).
The last two are not attention and never run in a path. If the kernel's time is near the larger of
the two, the tile is bound by that side; if it is near their sum, the two sides do not overlap.
"""

from __future__ import annotations

import argparse

import torch
from pingpong_probe import (  # scripts/ is on sys.path
    PINGPONG,
    ProbeSets,
    check_pingpong,
    describe,
    parse_variant,
    probe_sets,
    run_points,
)

from glmcheck.bench import D_V, time_ms
from glmcheck.inputs import poisoned_out
from glmcheck.kernels.union_pingpong import (
    DIAG_COMPUTE_ONLY,
    DIAG_GATHER_ONLY,
    DIAG_NONE,
)
from glmcheck.kernels.union_ws_launch import WsConfig, launch_pingpong

MODES = {"kernel": DIAG_NONE.value, "gather only": DIAG_GATHER_ONLY.value, "compute only": DIAG_COMPUTE_ONLY.value}


def run_mode(point: ProbeSets, config: WsConfig, diag: int, out: torch.Tensor) -> None:
    """One launch of the ping-pong tile under `config` in DIAG mode `diag` into `out`."""
    launch_pingpong(point.args, point.sets, out, point.scale, point.kv_int64, config, diag=diag)


def check_mode(point: ProbeSets, config: WsConfig, name: str, diag: int) -> bool:
    """The diagnostic's own check on a poisoned output (see the module docstring); prints it."""
    out = poisoned_out(point.args.q.shape[0], point.args.num_heads, D_V, "cuda")
    run_mode(point, config, diag, out)
    torch.cuda.synchronize()
    rows = out[:point.tokens]
    ok = bool((rows == 0).all()) if diag == MODES["gather only"] else bool(rows.isfinite().all())
    expected = "all zero" if diag == MODES["gather only"] else "all finite"
    print(f"{point.label} {describe(config)} {name}: output {expected}: {ok}", flush=True)
    return ok


def ceiling(seq_len: int, heads: int, config: WsConfig) -> bool:
    """Gate, then time the three modes at one point and print them; False when a check fails."""
    point = probe_sets(seq_len, heads)
    if point is None or check_pingpong(point, config) is None:
        return False
    if not all(check_mode(point, config, name, diag) for name, diag in MODES.items() if diag):
        print(f"{point.label}: a diagnostic check failed; nothing timed", flush=True)
        return False
    out = poisoned_out(point.args.q.shape[0], point.args.num_heads, D_V, "cuda")
    times = {name: time_ms(lambda d=diag: run_mode(point, config, d, out)) for name, diag in MODES.items()}
    rows = int(point.sets.lengths.sum())
    print(f"{point.label} {describe(config)}, {rows} rows (ms, median; ratio to the kernel):", flush=True)
    for name, ms in times.items():
        print(f"  {name:<13} {ms:7.3f}  {ms / times['kernel']:5.2f}", flush=True)
    return True


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seq-len", type=int, nargs="+", default=[8192])
    parser.add_argument("--heads", type=int, nargs="+", default=[64, 8], choices=[8, 16, 32, 64])
    parser.add_argument("--variant", type=parse_variant, default=PINGPONG,
                        help="the ping-pong config to diagnose, e.g. consumer_regs=232")
    ns = parser.parse_args()
    return run_points(ns.seq_len, ns.heads, lambda seq_len, heads: ceiling(seq_len, heads, ns.variant))


if __name__ == "__main__":
    raise SystemExit(main())
