"""Where a pair of blocks spends its cycles in the ping-pong tile: %clock64 stamps (diagnostic,
branch exp/pingpong; GPU, seconds).

Usage (H200): PYTHONPATH=. python3 scripts/pingpong_trace.py [--seq-len 8192] [--heads 64 8]
The traced kernel (TRACE=True) must first pass the fp32-reference gate on a poisoned output
Each consumer warpgroup stamps six events per pair (first TRACE_PAIRS pairs of each group, the
low 32 bits of %clock64 kept in shared memory until the group ends): 0 its stage is full, 1 S is ready, 2 P and the max are published,
3 the peer's max is seen, 4 its first O += P V is done, 5 its second is done. Printed: medians
over programs and the steady pairs (not the first or last two) of each gap, in SM cycles, in
the order each warpgroup stamps them (the even one runs 0 1 2 4 3 5, the odd one 0 3 1 2 4 5).
Then the whole program: the SM clock (%clock64 against %globaltimer), program cycles beyond its
pairs times the steady period (prologue, epilogue, first and last pairs), and per SM the gaps
between one program's exit and the next one's entry (launch of the next CTA). --compute-only
repeats all of it for the kernel's compute-only form (DIAG: free gathers, the consumers' own pace).
"""

from __future__ import annotations

import argparse
import functools
import itertools

import torch
import triton.testing
from pingpong_probe import describe, parse_variant  # scripts/ is on sys.path

from glmcheck import metrics
from glmcheck.bench import D_V, GATE_REL_L2, BenchPoint, make_inputs
from glmcheck.inputs import poisoned_out
from glmcheck.kernels.prefill import LOG2E, needs_int64_rows
from glmcheck.kernels.union import UnionSets, token_row_sets, union_dedup
from glmcheck.kernels.union_pingpong import (
    DIAG_COMPUTE_ONLY,
    DIAG_NONE,
    ENTRY_CLOCK,
    ENTRY_NS,
    EXIT_CLOCK,
    EXIT_NS,
    SM_ID,
)
from glmcheck.kernels.union_pingpong import TRACE_EVENTS as _EVENTS
from glmcheck.kernels.union_pingpong import TRACE_PAIRS as _PAIRS
from glmcheck.kernels.union_pingpong import TRACE_SLOTS as _SLOTS
from glmcheck.kernels.union_ws_launch import WsConfig, launch_pingpong
from glmcheck.kernels.validate import PrefillArgs
from glmcheck.reference import sparse_mla_reference

TRACE_PAIRS, TRACE_SLOTS, TRACE_EVENTS = _PAIRS.value, _SLOTS.value, _EVENTS.value  # gl.constexpr -> int
EVENT_NAMES = {0: ("full", "full"), 1: ("S ready", "S ready"), 2: ("published", "published"),
               3: ("peer max seen", "peer max seen"), 4: ("own PV done", "peer PV done"),
               5: ("peer PV done", "own PV done")}  # (even, odd) names of each stamp


def median(values: torch.Tensor) -> float:
    return float(values.double().median()) if values.numel() else float("nan")


def clock_delta(later: torch.Tensor, earlier: torch.Tensor) -> torch.Tensor:
    """Cycles from `earlier` to `later` (int64 tensors) where the pair stamps hold only the low 32
    bits of %clock64 (sign-extended): the difference modulo 2^32, as a signed value (a program's
    stamps lie well within 2^31 cycles of each other)."""
    return torch.remainder(later - earlier + 2**31, 2**32) - 2**31


def report(trace: torch.Tensor, lengths: torch.Tensor, block_n: int = 64) -> float:
    """trace [groups, 2, TRACE_PAIRS, TRACE_EVENTS] int64: the low 32 bits of %clock64 (see
    `clock_delta`); returns the even warpgroup's median steady pair period (cycles)."""
    pairs = (lengths.long() + 2 * block_n - 1) // (2 * block_n)
    steady = torch.arange(TRACE_PAIRS, device=trace.device)[None, :]
    keep = (steady >= 2) & (steady < pairs[:, None] - 2)  # [groups, TRACE_PAIRS]
    print(f"steady pairs traced: {int(keep.sum())} over {int(keep.any(1).sum())} programs", flush=True)
    for warpgroup in (0, 1):
        stamps = trace[:, warpgroup]
        # Events in the order this warpgroup stamps them (the pipeline's, which has changed between
        # GPU runs), taken from their median offset after the stage-full stamp.
        order = sorted(range(TRACE_EVENTS),
                       key=lambda e: median(clock_delta(stamps[..., e], stamps[..., 0])[keep]))
        cells = [f"{EVENT_NAMES[a][warpgroup]} -> {EVENT_NAMES[b][warpgroup]} "
                 f"{median(clock_delta(stamps[..., b], stamps[..., a])[keep]):.0f}"
                 for a, b in itertools.pairwise(order)]
        period = clock_delta(stamps[:, 1:, 0], stamps[:, :-1, 0])[keep[:, :-1]]
        cells.append(f"pair period {median(period):.0f}")
        print(f"  {'even' if warpgroup == 0 else 'odd'}: " + "; ".join(cells), flush=True)
    even, odd = trace[:, 0], trace[:, 1]
    handoffs = {"even published -> odd sees it": clock_delta(odd[..., 3], even[..., 2]),
                "odd published -> even sees it": clock_delta(even[..., 3], odd[..., 2]),
                "even full -> odd full": clock_delta(odd[..., 0], even[..., 0])}
    print("  handoffs: " + "; ".join(f"{name} {median(gap[keep]):.0f}" for name, gap in handoffs.items()),
          flush=True)
    return median(clock_delta(even[:, 1:, 0], even[:, :-1, 0])[keep[:, :-1]])


def report_programs(trace: torch.Tensor, program: torch.Tensor, lengths: torch.Tensor, period: float,
                    kernel_ms: float, block_n: int = 64) -> None:
    """Where the whole kernel's time goes beyond the steady pairs. program [groups, 2, TRACE_EVENTS]
    int64: the program slot (ENTRY_CLOCK ... SM_ID, full 64-bit values); trace as in `report`;
    period in cycles."""
    pairs = ((lengths.long() + 2 * block_n - 1) // (2 * block_n)).double()
    entry_clock, entry_ns = program[:, 0, ENTRY_CLOCK].double(), program[:, 0, ENTRY_NS].double()
    exit_clock = program[:, :, EXIT_CLOCK].amax(1).double()
    exit_ns = program[:, :, EXIT_NS].amax(1).double()
    cycles = exit_clock - entry_clock
    ghz = median(cycles / (exit_ns - entry_ns).clamp(min=1))
    first_full = clock_delta(trace[:, 0, 0, 0], program[:, 0, ENTRY_CLOCK]).double()
    overhead = cycles - pairs * period
    print(f"  programs: {program.shape[0]}, SM clock {ghz:.3f} GHz (clock64 / globaltimer); per program median "
          f"{median(cycles):.0f} cycles, {median(pairs):.0f} pairs; entry -> first stage full "
          f"{median(first_full):.0f}; program cycles - pairs x period: median "
          f"{median(overhead):.0f}, mean {float(overhead.mean()):.0f}", flush=True)
    span_ns = float(exit_ns.max() - entry_ns.min())
    sms = program[:, 0, SM_ID]
    gaps, busy = [], 0.0
    for sm in sms.unique():
        mine = (sms == sm).nonzero().squeeze(1)
        order = mine[entry_ns[mine].argsort()]
        gaps.append(entry_ns[order[1:]] - exit_ns[order[:-1]])
        busy += float((exit_ns[order] - entry_ns[order]).sum())
    gaps = torch.cat(gaps)
    steady = float((pairs * period).sum() / cycles.sum())
    print(f"  kernel span {span_ns / 1e6:.3f} ms (timed {kernel_ms:.3f}); {sms.unique().numel()} SMs busy "
          f"{busy / (sms.unique().numel() * span_ns):.1%} of the span; gap between an SM's programs median "
          f"{median(gaps):.0f} ns; steady-pair share of program time {steady:.1%}", flush=True)


def report_ends(trace: torch.Tensor, program: torch.Tensor, lengths: torch.Tensor, period: float,
                block_n: int = 64) -> None:
    """Where a program's time beyond its steady pairs goes, over the programs of exactly
    TRACE_PAIRS pairs (all their pairs are stamped): entry to each warpgroup's first stage full,
    the first two pair periods, and each warpgroup's last stage full to its exit, less one steady
    `period` (the last pair's tail, the row-sum exchange, O's store; in the traced build also the
    stamps' flush). trace and program as in `report_programs`."""
    pairs = (lengths.long() + 2 * block_n - 1) // (2 * block_n)
    whole = pairs == TRACE_PAIRS
    if not bool(whole.any()):
        return
    t, p = trace[whole], program[whole]
    entry = p[:, 0, ENTRY_CLOCK]
    cells = {"entry -> even first full": clock_delta(t[:, 0, 0, 0], entry),
             "entry -> odd first full": clock_delta(t[:, 1, 0, 0], entry),
             "first pair period": clock_delta(t[:, 0, 1, 0], t[:, 0, 0, 0]),
             "second pair period": clock_delta(t[:, 0, 2, 0], t[:, 0, 1, 0]),
             "even last full -> exit - period": clock_delta(p[:, 0, EXIT_CLOCK], t[:, 0, -1, 0]) - period,
             "odd last full -> exit - period": clock_delta(p[:, 1, EXIT_CLOCK], t[:, 1, -1, 0]) - period}
    print(f"  ends ({int(whole.sum())} programs of {TRACE_PAIRS} pairs): "
          + "; ".join(f"{name} {median(value.double()):.0f}" for name, value in cells.items()), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seq-len", type=int, default=8192)
    parser.add_argument("--heads", type=int, nargs="+", default=[64])
    parser.add_argument("--variant", type=parse_variant, default=WsConfig(tile="pingpong"),
                        help="the ping-pong config to trace (pingpong_probe.py's form), e.g. consumer_regs=232")
    parser.add_argument("--compute-only", action="store_true",
                        help="also trace the kernel's compute-only diagnostic form (free gathers)")
    ns = parser.parse_args()
    for heads in ns.heads:
        group = 64 // heads
        x = make_inputs(BenchPoint(1, ns.seq_len, heads), seed=17)
        args = PrefillArgs(x.q, x.kv, x.indices, None, x.sm_scale, D_V)
        kv_int64 = needs_int64_rows(args.num_kv_rows, args.d_qk)
        sets = (token_row_sets(x.indices, None, args.num_kv_rows) if group == 1
                else union_dedup(x.indices, group, num_kv_rows=args.num_kv_rows))
        tokens = sets.lengths.shape[0] * group
        trace = torch.zeros(sets.lengths.shape[0], 2, TRACE_SLOTS, TRACE_EVENTS, dtype=torch.int64, device="cuda")
        config = ns.variant
        run = make_run(args, sets, x.sm_scale * LOG2E, kv_int64, config)
        out = traced_run(run, trace, DIAG_NONE.value)
        label = f"1x{ns.seq_len} H={heads} G={group} {describe(config)}"
        reference = sparse_mla_reference(x.q[:tokens], x.kv, x.indices[:tokens], x.sm_scale, D_V,
                                         dtype=torch.float32)
        rel = metrics.rel_l2(out[:tokens], reference)
        if not rel <= GATE_REL_L2:
            print(f"{label}: gate failed (rel-L2 {rel:.3e})", flush=True)
            return 1
        label += f" (rel-L2 {rel:.2e})"
        print(label, flush=True)
        time_and_report(run, out, trace, sets.lengths, DIAG_NONE.value)
        if ns.compute_only:
            # The kernel's compute-only form (the producer gathers each group's first pair only:
            # scripts/pingpong_ceiling.py), so the stamps show the consumers' own pace. Its output is
            # not attention; it must be finite on every row.
            out = traced_run(run, trace, DIAG_COMPUTE_ONLY.value)
            finite = bool(out[:tokens].isfinite().all())
            print(f"compute only (not attention; output finite on every row: {finite})", flush=True)
            if not finite:
                return 1
            time_and_report(run, out, trace, sets.lengths, DIAG_COMPUTE_ONLY.value)
    return 0


def make_run(args: PrefillArgs, sets: UnionSets, qk_scale_log2: float, kv_int64: bool,
             config: WsConfig) -> functools.partial:
    """launch_pingpong on this point, still to be given out= and (optionally) trace= and diag=."""
    return functools.partial(launch_pingpong, args, sets, qk_scale_log2=qk_scale_log2, kv_int64=kv_int64,
                             config=config)


def traced_run(run: functools.partial, trace: torch.Tensor, diag: int) -> torch.Tensor:
    """`make_run`'s launch once to compile and warm, then once more into a zeroed trace; the
    second run's poisoned-then-written output [T, H, D_V]."""
    args = run.args[0]
    out = poisoned_out(args.q.shape[0], args.num_heads, D_V, args.q.device)
    run(out=out, trace=trace, diag=diag)
    trace.zero_()
    run(out=out, trace=trace, diag=diag)
    if out.is_cuda:
        torch.cuda.synchronize()
    return out


def time_and_report(run: functools.partial, out: torch.Tensor, trace: torch.Tensor, lengths: torch.Tensor,
                    diag: int) -> None:
    """Time the untraced kernel (for the span's comparison), then print `report` and
    `report_programs` of the trace."""
    kernel_ms = triton.testing.do_bench(functools.partial(run, out=out, diag=diag))
    period = report(trace[:, :, :TRACE_PAIRS], lengths)
    report_programs(trace[:, :, :TRACE_PAIRS], trace[:, :, TRACE_PAIRS], lengths, period, kernel_ms)
    report_ends(trace[:, :, :TRACE_PAIRS], trace[:, :, TRACE_PAIRS], lengths, period)


if __name__ == "__main__":
    raise SystemExit(main())
