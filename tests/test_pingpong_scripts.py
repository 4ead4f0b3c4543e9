"""The CPU-side parts of the ping-pong GPU scripts (scripts/pingpong_probe.py, pingpong_ceiling.py):
their argument parsing and how they turn per-point results into an exit status. The kernels they
launch need an sm_90 GPU; gpu_session.sh runs them there."""

from __future__ import annotations

import argparse

import pytest

from glmcheck.kernels.union_pingpong import (
    DIAG_COMPUTE_ONLY,
    DIAG_GATHER_ONLY,
    DIAG_NONE,
)
from tests.script_loader import load_script


@pytest.fixture(scope="module")
def probe():
    return load_script("pingpong_probe")


def test_run_points_runs_every_point_and_fails_when_one_fails(probe):
    seen: list[tuple[int, int]] = []

    def check(seq_len: int, heads: int) -> bool:
        seen.append((seq_len, heads))
        return (seq_len, heads) != (2048, 8)

    assert probe.run_points([2048, 8192], [8, 64], check) == 1
    assert seen == [(2048, 8), (2048, 64), (8192, 8), (8192, 64)], "a point after the failure did not run"
    assert probe.run_points([8192], [64], lambda *_: True) == 0


def test_parse_variant_builds_a_pingpong_config_and_names_a_bad_field(probe):
    config = probe.parse_variant("consumer_regs=232")
    assert (config.tile, config.consumer_regs) == ("pingpong", 232)
    with pytest.raises(argparse.ArgumentTypeError, match="consumer_regs"):
        probe.parse_variant("consumer_regz=232")
    with pytest.raises(argparse.ArgumentTypeError, match="field=int"):
        probe.parse_variant("consumer_regs=many")


def test_ceiling_script_times_the_kernel_and_both_diagnostic_forms():
    ceiling = load_script("pingpong_ceiling")
    assert ceiling.MODES == {"kernel": DIAG_NONE.value, "gather only": DIAG_GATHER_ONLY.value,
                             "compute only": DIAG_COMPUTE_ONLY.value}
    assert ceiling.MODES["kernel"] == 0, "the kernel's own form is DIAG 0, what every path runs"
