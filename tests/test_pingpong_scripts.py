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


def test_l2_window_probe_packs_the_access_policy_window_and_names_a_bad_argument():
    """The window's bytes as cudaStreamAttrValue lays them out (base, size, hit ratio, hit and miss
    properties at 0, 8, 16, 20, 24); the empty window is all zero, which clears the attribute."""
    import struct

    l2 = load_script("l2_window_probe")
    value = l2.access_policy_window(0x7F0012340000, 9_437_184, 0.5)
    assert len(value) == l2.ATTR_VALUE_BYTES == 64
    base, size, ratio, hit, miss = struct.unpack_from("<QQfii", value)
    assert (base, size, ratio) == (0x7F0012340000, 9_437_184, 0.5)
    assert (hit, miss) == (l2.ACCESS_PERSISTING, l2.ACCESS_STREAMING) == (2, 1)
    assert value[28:] == bytes(36)
    assert l2.access_policy_window(0x1000, 0) == bytes(64)
    with pytest.raises(ValueError, match="hit_ratio"):
        l2.access_policy_window(0x1000, 64, 1.5)
    with pytest.raises(ValueError, match="num_bytes"):
        l2.access_policy_window(0x1000, -1)


def test_pingpong_ab_takes_named_kernel_files_and_swaps_the_launchers_kernel(tmp_path, monkeypatch):
    """scripts/pingpong_ab.py: NAME=PATH of an existing .py file ('default' is the committed kernel's
    name, so taken), and use_kernel puts a kernel where the launcher imports it from, per tile."""
    from glmcheck.kernels import union_pingpong, union_ws

    ab = load_script("pingpong_ab")
    copy = tmp_path / "variant.py"
    copy.write_text("sparse_mla_union_pingpong_kernel = 'edited'\n")
    assert ab.parse_kernel_variant(f"fast={copy}") == ("fast", copy)
    for bad, message in ((f"default={copy}", "other than 'default'"), (f"2fast={copy}", "identifier"),
                         (str(copy), "NAME=PATH"), (f"x={tmp_path / 'missing.py'}", "existing .py file"),
                         (f"x={tmp_path}", "existing .py file")):
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            ab.parse_kernel_variant(bad)
    assert ab.load_kernel_file("fast", copy).sparse_mla_union_pingpong_kernel == "edited"
    monkeypatch.setattr(union_pingpong, "sparse_mla_union_pingpong_kernel", union_pingpong.sparse_mla_union_pingpong_kernel)
    monkeypatch.setattr(union_ws, "sparse_mla_union_ws_kernel", union_ws.sparse_mla_union_ws_kernel)
    ab.use_kernel("pingpong", "pingpong stand-in")
    ab.use_kernel("split", "split stand-in")
    assert union_pingpong.sparse_mla_union_pingpong_kernel == "pingpong stand-in"
    assert union_ws.sparse_mla_union_ws_kernel == "split stand-in"


def test_gpu_session_documents_every_step_it_runs():
    """Each `case` label of scripts/gpu_session.sh is named in its usage line and in the error
    message of a missing STEP, so a step added to the case is documented where users look."""
    import pathlib
    import re

    text = (pathlib.Path(__file__).resolve().parents[1] / "scripts" / "gpu_session.sh").read_text()
    steps = re.findall(r"^  ([a-z0-9]+)\)", text, flags=re.MULTILINE)
    usage = re.search(r"gpu_session\.sh OUTDIR (\S+)", text).group(1).split("|")
    missing = re.search(r"step=\$\{2:\?STEP: ([^}]+)\}", text).group(1)
    assert "accuracy" in steps and "bench" in steps
    assert sorted(steps) == sorted(usage), "the usage line and the case disagree"
    assert all(re.search(rf"\b{step}\b", missing) for step in steps), "the STEP message misses a step"
