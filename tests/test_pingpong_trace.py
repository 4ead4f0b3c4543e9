"""scripts/pingpong_trace.py reads the ping-pong tile's clock stamps (the kernel needs an sm_90
GPU; the reading does not): pair stamps keep only the low 32 bits of %clock64, so differences
are taken modulo 2^32; the per-pair and per-program reports give back planted figures."""

from __future__ import annotations

import pytest
import torch

from tests.script_loader import load_script


@pytest.fixture(scope="module")
def trace_script():
    return load_script("pingpong_trace")


def low32(clock: torch.Tensor) -> torch.Tensor:
    """What the kernel stores: the low 32 bits of a clock, as a sign-extended int32."""
    return clock.to(torch.int64).bitwise_and(2**32 - 1).to(torch.int32).to(torch.int64)


def test_clock_delta_undoes_the_32_bit_wrap(trace_script):
    start = torch.tensor([2**32 - 100, 2**31 - 5, 7 * 2**32 + 12], dtype=torch.int64)
    later = start + torch.tensor([250, 1_000_000, 3])
    assert torch.equal(trace_script.clock_delta(low32(later), low32(start)), torch.tensor([250, 1_000_000, 3]))
    assert torch.equal(trace_script.clock_delta(low32(start), low32(later)), torch.tensor([-250, -1_000_000, -3]))


def test_report_reads_the_pair_period_across_a_wrap(trace_script, capsys):
    """Two groups of 16 pairs stamped as the kernel stores them (low 32 bits, one pair crossing
    2^31, where the sign-extended value jumps by 2^32): every gap printed is the planted one. (A
    crossing is rare in real traces, once per 2^32 cycles, and the medians would absorb it; the
    per-program figures below are where the wrap matters.)"""
    pairs, events, period = trace_script.TRACE_PAIRS, trace_script.TRACE_EVENTS, 9000
    offsets = torch.tensor([0, 1500, 2500, 6000, 3500, 7500])  # even: full, S, published, peer seen, PV, PV
    starts = 2**31 - 700 + torch.arange(pairs) * (2**32 + period)  # the same low 32 bits, plus a period
    base = starts[:, None] + offsets[None, :]  # [pairs, events]
    clocks = torch.stack([base, base + 1000]).unsqueeze(0).repeat(2, 1, 1, 1)  # [groups, 2, pairs, events]
    assert clocks.shape == (2, 2, pairs, events)
    measured = trace_script.report(low32(clocks), torch.full((2,), 2 * 64 * pairs))
    printed = capsys.readouterr().out
    assert measured == period
    assert "pair period 9000" in printed and "full -> S ready 1500" in printed
    assert "even full -> odd full 1000" in printed


def test_report_programs_reads_clock_rate_overhead_and_gaps(trace_script, capsys):
    """Four groups of four pairs on two SMs with planted figures: 2 GHz, 3 000 cycles from entry to the
    first full stage (the entry a full 64-bit clock beyond 2^32, the stamp its low 32 bits), 2 000
    cycles per program beyond pairs x period, 500 ns between an SM's programs."""
    pairs, events, period = trace_script.TRACE_PAIRS, trace_script.TRACE_EVENTS, 9000
    groups, group_pairs = 4, 4
    cycles = group_pairs * period + 2000
    entry_ns = torch.tensor([0, 0, cycles // 2 + 500, cycles // 2 + 500])  # 2 cycles per ns
    entry_clock = 5 * 2**32 + 123 + 2 * entry_ns
    program = torch.zeros(groups, 2, events, dtype=torch.int64)
    program[:, 0, trace_script.ENTRY_CLOCK] = entry_clock
    program[:, 0, trace_script.ENTRY_NS] = entry_ns
    program[:, :, trace_script.EXIT_CLOCK] = (entry_clock + cycles)[:, None]
    program[:, :, trace_script.EXIT_NS] = (entry_ns + cycles // 2)[:, None]
    program[:, 0, trace_script.SM_ID] = torch.tensor([0, 1, 0, 1])
    trace = torch.zeros(groups, 2, pairs, events, dtype=torch.int64)
    trace[:, 0, 0, 0] = low32(entry_clock + 3000)
    lengths = torch.full((groups,), 2 * 64 * group_pairs)
    trace_script.report_programs(trace, program, lengths, float(period), kernel_ms=0.04)
    printed = capsys.readouterr().out
    assert "SM clock 2.000 GHz" in printed
    assert "entry -> first stage full 3000" in printed
    assert "program cycles - pairs x period: median 2000, mean 2000" in printed
    assert "gap between an SM's programs median 500 ns" in printed


def test_report_ends_reads_a_programs_first_and_last_pairs(trace_script, capsys):
    """Two groups of TRACE_PAIRS pairs (every pair stamped) and one shorter group, which is left out:
    planted entry -> first full (even 3 000, odd 3 400), first two pair periods (12 000, 10 000,
    then 9 000), and the last full -> exit beyond one period (even 2 500, odd 1 800)."""
    pairs, events, period = trace_script.TRACE_PAIRS, trace_script.TRACE_EVENTS, 9000
    entry = torch.tensor([3 * 2**32 + 55, 2**31 - 10, 77], dtype=torch.int64)
    gaps = torch.tensor([12000, 10000] + [period] * (pairs - 2))
    full = entry[:, None] + 3000 + torch.cat([torch.zeros(1, dtype=torch.int64), gaps.cumsum(0)[:-1]])[None, :]
    trace = torch.zeros(3, 2, pairs, events, dtype=torch.int64)
    trace[:, 0, :, 0] = low32(full)
    trace[:, 1, :, 0] = low32(full + 400)
    program = torch.zeros(3, 2, events, dtype=torch.int64)
    program[:, 0, trace_script.ENTRY_CLOCK] = entry
    program[:, 0, trace_script.EXIT_CLOCK] = full[:, -1] + period + 2500
    program[:, 1, trace_script.EXIT_CLOCK] = full[:, -1] + 400 + period + 1800
    program[2, :, trace_script.EXIT_CLOCK] = 0  # the short group: its figures would spoil every median
    lengths = torch.tensor([2 * 64 * pairs, 2 * 64 * pairs - 5, 2 * 64 * 3])
    trace_script.report_ends(trace, program, lengths, float(period))
    printed = capsys.readouterr().out
    assert f"ends (2 programs of {pairs} pairs)" in printed
    for figure in ("entry -> even first full 3000", "entry -> odd first full 3400", "first pair period 12000",
                   "second pair period 10000", "even last full -> exit - period 2500",
                   "odd last full -> exit - period 1800"):
        assert figure in printed, figure


def test_traced_run_warms_then_traces_into_a_zeroed_buffer_with_the_launchers_arguments(trace_script,
                                                                                       monkeypatch):
    """traced_run launches twice (compile and warm, then the traced run) with keywords the real
    launch_pingpong takes, zeroes the trace in between, and hands back the output it launched
    into (launch stubbed: the kernel needs an sm_90 GPU)."""
    import inspect

    from glmcheck.kernels.union import UnionSets
    from glmcheck.kernels.union_ws_launch import WsConfig, launch_pingpong
    from glmcheck.kernels.validate import PrefillArgs
    signature = inspect.signature(launch_pingpong)
    calls: list[dict] = []

    def fake_launch(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)  # TypeError on a keyword the launcher lacks
        calls.append(dict(bound.arguments))
        bound.arguments["trace"].add_(1)  # what the kernel would stamp
        bound.arguments["out"].zero_()

    monkeypatch.setattr(trace_script, "launch_pingpong", fake_launch)
    q, kv = torch.zeros((8, 8, 576)), torch.zeros((32, 576))
    args = PrefillArgs(q, kv, torch.zeros((8, 4), dtype=torch.int32), None, 0.1, 512)
    sets = UnionSets(torch.zeros((1, 64), dtype=torch.int32), torch.zeros((1, 64), dtype=torch.uint8),
                     torch.zeros(1, dtype=torch.int32), 8)
    trace = torch.full((1, 2, 17, 6), 7, dtype=torch.int64)
    run = trace_script.make_run(args, sets, 0.25, False, WsConfig(tile="pingpong"))
    out = trace_script.traced_run(run, trace, 2)
    assert len(calls) == 2 and all(call["diag"] == 2 and call["trace"] is trace for call in calls)
    assert calls[1]["out"] is out and calls[0]["qk_scale_log2"] == 0.25
    assert torch.equal(trace, torch.ones_like(trace)), "the traced run's stamps sit on the warm-up's"
    assert out.shape == (8, 8, 512) and not out.isnan().any()
