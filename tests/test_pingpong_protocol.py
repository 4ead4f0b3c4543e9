"""The ping-pong tile's barrier protocol, modelled on the CPU (tests/pingpong_protocol.py): no
buffer race, stale read or deadlock under many random interleavings, for the one-group kernel and
for the persistent one over several groups (empty ones among them); planted early releases are
caught. The GPU tests check the kernels' values; a race there may show only now and then, so the
protocol is also checked here."""

from __future__ import annotations

import pytest

from tests.pingpong_protocol import PipelineOptions, ProtocolViolation, run_schedule

SCHEDULES = 400
ONE_GROUP = [4]
PERSISTENT = [2, 0, 3, 1, 0, 0, 2]  # pairs per group of one program; 0: an empty group


@pytest.mark.parametrize("groups", [ONE_GROUP, PERSISTENT], ids=["one group", "persistent"])
def test_pingpong_protocol_has_no_race_or_deadlock(groups):
    steps = [run_schedule(PipelineOptions(), groups, seed) for seed in range(SCHEDULES)]
    assert min(steps) > 40 * sum(groups), "the model ran too few steps to be the kernel's pipeline"


@pytest.mark.parametrize(("options", "groups"), [
    (PipelineOptions(odd_release_outstanding=2), ONE_GROUP),
    (PipelineOptions(even_release_unwaited=True), ONE_GROUP),
    (PipelineOptions(odd_block_release_unwaited=True), ONE_GROUP),
    (PipelineOptions(q_reload_unwaited=True), PERSISTENT),
    (PipelineOptions(q_free_unwaited=True), PERSISTENT),
], ids=["0R freed before O += P0 V0 is done", "0L freed before O += P0 V0 is done",
        "1L freed before O += P1 V1 is done", "next Q copied without waiting on q_free",
        "q_free arrived before the last S is done"])
def test_pingpong_protocol_catches_a_planted_early_release(options, groups):
    with pytest.raises(ProtocolViolation, match="while an MMA still reads it"):
        for seed in range(SCHEDULES):
            run_schedule(options, groups, seed)
