"""The ping-pong tile's barrier protocol, modelled on the CPU (tests/support/pingpong_protocol.py): no
buffer race, stale read or deadlock under many random interleavings, empty groups included; planted
early releases are caught. The GPU tests check the kernel's values; a race there may show only now
and then, so the protocol is also checked here."""

from __future__ import annotations

import pytest

from tests.support.pingpong_protocol import PipelineOptions, ProtocolViolation, run_schedule

SCHEDULES = 400
BLOCKS = 8  # four full pairs


@pytest.mark.parametrize("blocks", [BLOCKS, 7, 4, 3, 2, 1, 0],
                         ids=["four pairs", "three and a half", "two pairs", "one and a half", "one pair",
                              "a half pair", "empty group"])
def test_pingpong_protocol_has_no_race_or_deadlock(blocks):
    steps = [run_schedule(PipelineOptions(), blocks, seed) for seed in range(SCHEDULES)]
    assert min(steps) >= 20 * blocks, "the model ran too few steps to be the kernel's pipeline"


@pytest.mark.parametrize("options", [
    PipelineOptions(odd_release_outstanding=2),
    PipelineOptions(even_release_unwaited=True),
    PipelineOptions(odd_block_release_unwaited=True),
], ids=["0R freed before O += P0 V0 is done", "0L freed before O += P0 V0 is done",
        "1L freed before O += P1 V1 is done"])
def test_pingpong_protocol_catches_a_planted_early_release(options):
    with pytest.raises(ProtocolViolation, match="while an MMA still reads it"):
        for seed in range(SCHEDULES):
            run_schedule(options, BLOCKS, seed)


def test_pingpong_protocol_catches_the_next_s0_left_half_read_before_its_refill():
    """The next pair's S0 left half issued without waiting for 0L's refill reads the buffer while
    the gather writes it, or finds the previous pair's rows."""
    with pytest.raises(ProtocolViolation, match=r"while a gather is writing it|expected"):
        for seed in range(SCHEDULES):
            run_schedule(PipelineOptions(next_left_unwaited=True), BLOCKS, seed)


@pytest.mark.parametrize("options, match", [
    (PipelineOptions(odd_p_early=True), "writes odd_p while it is still read"),
    (PipelineOptions(peer_max_unwaited=True), "odd reads M0 reads max0: expected"),
], ids=["P1 stored before 1L's refill", "M0 read without its barrier"])
def test_pingpong_protocol_catches_a_planted_handoff_bug(options, match):
    """P1's buffer is free only once the even warpgroup's previous O += P1 V1 is done, which the
    odd warpgroup learns from 1L's refill; M0 is there only once its barrier says so."""
    with pytest.raises(ProtocolViolation, match=match):
        for seed in range(SCHEDULES):
            run_schedule(options, BLOCKS, seed)


@pytest.mark.parametrize("blocks", [1, 3])
def test_pingpong_protocol_catches_p0_read_unwaited_in_a_half_pair(blocks):
    """In a half pair the odd warpgroup's only read of the pair is P0, which is there only once the
    even warpgroup's barrier says so."""
    with pytest.raises(ProtocolViolation, match="odd O \\+= P0 V0 reads tail0: expected"):
        for seed in range(SCHEDULES):
            run_schedule(PipelineOptions(half_p0_unwaited=True), blocks, seed)


def test_pingpong_protocol_catches_o_staged_where_the_peer_still_reads():
    """The write-out stages each O half in the stage piece its warpgroup reads last, after the row-sum exchange
    (the peer's sums follow its last MMA). Staged before the exchange into 1L, which the even warpgroup's last
    O += P1 V1 reads, it races."""
    with pytest.raises(ProtocolViolation, match=r"consumer 1 stages O|writes main1 L while it is still read"):
        for seed in range(SCHEDULES):
            run_schedule(PipelineOptions(odd_stages_out_into="main1 L", stage_out_before_sums=True), BLOCKS, seed)


@pytest.mark.parametrize("blocks", [BLOCKS, 7, 1])
def test_pingpong_protocol_any_stage_piece_is_free_after_the_row_sum_exchange(blocks):
    """After the exchange every stage piece is free, 1L included (the even warpgroup's last reader)."""
    for seed in range(SCHEDULES // 4):
        run_schedule(PipelineOptions(odd_stages_out_into="main1 L"), blocks, seed)
