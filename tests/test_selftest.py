"""The mutation self-test: baseline passes, every planted fault is caught, nothing leaks."""

from __future__ import annotations

import argparse
import hashlib
import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from glmcheck.commands import selftest as selftest_command
from glmcheck.selftest.mutants import (
    CATALOGUE,
    PACKAGE_PREFIX,
    MutantError,
    apply_mutation,
    find_mutant,
    mutant_names,
    mutated_kernels,
    real_kernels_dir,
)
from glmcheck.selftest.mutation_runs import run_baseline, run_selftest
from glmcheck.selftest.suite import SUITE
from tests.support.tamper import assert_tampering_refused

REQUIRED = {"ownership_ignored", "tail_dropped", "search_off_by_one", "duplicate_row", "rope_tail_dropped",
            "softmax_scale_no_log2e", "empty_slot_as_row0", "topk_length_ignored", "int32_offset_wrap",
            "merge_bits_short", "merge_copies_emitted",
            "tree_bits_lost", "anchor_shared_bits_lost", "marks_bits_overwritten", "prefix_owner_short"}


def kernel_digest() -> str:
    """Hash of every real kernel source file."""
    digest = hashlib.sha256()
    for path in sorted(real_kernels_dir().rglob("*.py")):
        digest.update(str(path.relative_to(real_kernels_dir())).encode() + path.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def digest_before() -> str:
    return kernel_digest()


@pytest.fixture(scope="module")
def report(digest_before):
    """The full run (baseline, then every mutant to its first failing check), once."""
    return run_selftest()


def test_catalogue_covers_every_required_fault():
    assert set(mutant_names()) == REQUIRED
    assert len(mutant_names()) == len(CATALOGUE)
    assert "EMULATION" in find_mutant("int32_offset_wrap").note


def test_every_snippet_occurs_exactly_once():
    for mutant in CATALOGUE:
        source = (real_kernels_dir() / mutant.file).read_text()
        assert source.count(mutant.snippet) == 1, mutant.name


def test_baseline_passes(report):
    assert [o.name for o in report.baseline] == [c.name for c in SUITE]
    failing = [(o.name, o.detail) for o in report.baseline if not o.passed]
    assert not failing
    assert report.baseline_passed


def test_every_mutant_detected_by_a_failing_check_not_a_crash(report):
    assert report.total == len(CATALOGUE)
    missed = [r.mutant.name for r in report.mutants if not r.detected]
    assert not missed, f"undetected mutants: {missed}"
    for r in report.mutants:
        assert not r.caught.crashed, f"{r.mutant.name} was caught by a crash: {r.caught.detail}"
        assert r.margin >= 5, f"{r.mutant.name} caught by {r.caught_by} with margin only {r.margin:.3g}"
    assert report.score == 1.0 and report.passed


def test_expected_catchers(report):
    caught = {r.mutant.name: r.caught_by for r in report.mutants}
    assert caught["int32_offset_wrap"] == "per_token_large_kv"
    assert caught["topk_length_ignored"] == "per_token_topk_length"
    assert caught["tail_dropped"] == "union_g2"
    assert math.isinf(next(r.margin for r in report.mutants if r.mutant.name == "tail_dropped"))
    details = {r.mutant.name: r.caught.detail for r in report.mutants}  # union_dedup stops at the first bad build
    assert "up to the G=2 marks build on the overlapping selections" in details["marks_bits_overwritten"]
    assert "up to the G=2 marks build on the prefix selections" in details["prefix_owner_short"]
    assert "up to the G=2 merge build" in details["merge_bits_short"]
    baseline_dedup = next(o for o in report.baseline if o.name == "union_dedup")
    assert baseline_dedup.passed and "marks, merge, tree, search builds" in baseline_dedup.detail


def test_missing_snippet_raises():
    broken = replace(find_mutant("rope_tail_dropped"), snippet="if D_TAIL > 99:")
    with pytest.raises(MutantError, match="occurs 0 times"):
        apply_mutation((real_kernels_dir() / broken.file).read_text(), broken)
    with pytest.raises(MutantError, match="exactly once"), mutated_kernels(broken):
        pass
    twice = replace(find_mutant("rope_tail_dropped"), file="prefill.py", snippet="args.sm_scale")
    with pytest.raises(MutantError, match=r"occurs [2-9] times"), mutated_kernels(twice):
        pass
    missing_file = replace(find_mutant("rope_tail_dropped"), file="no_such_kernel.py")
    with pytest.raises(MutantError, match="does not exist"), mutated_kernels(missing_file):
        pass
    assert not [name for name in sys.modules if name.startswith(PACKAGE_PREFIX)]


def test_mutated_copy_is_isolated_and_cleaned_up():
    import glmcheck.kernels as real

    mutant = find_mutant("rope_tail_dropped")
    with mutated_kernels(mutant) as impl:
        assert impl.__name__.startswith(PACKAGE_PREFIX)
        assert impl.sparse_mla_prefill is not real.sparse_mla_prefill
        per_token = sys.modules[f"{impl.__name__}.per_token"]
        assert "if D_TAIL < 0:" in Path(per_token.__file__).read_text()
        assert impl.prefill.sparse_mla_token_kernel is not real.prefill.sparse_mla_token_kernel
        path_entry = str(Path(per_token.__file__).parents[1])
        assert path_entry in sys.path
    assert not [name for name in sys.modules if name.startswith(PACKAGE_PREFIX)]
    assert path_entry not in sys.path


def test_real_kernels_unchanged_after_mutants(report, digest_before):
    assert report.total == len(CATALOGUE)  # the mutants have run
    assert kernel_digest() == digest_before
    assert not [name for name in sys.modules if name.startswith(PACKAGE_PREFIX)]
    assert all(o.passed for o in run_baseline())


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="glmcheck")
    selftest_command.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_cli_one_mutant_exits_zero_and_prints_score(monkeypatch, capsys):
    import glmcheck.selftest.mutation_runs as runner

    # The real runner and mutant, on the two checks that reach this mutant's catcher (the whole suite's baseline
    # runs in the module's report already; here it would cost the interpreter ~20 s more).
    real_run = runner.run_selftest
    monkeypatch.setattr(runner, "run_selftest", lambda mutants, **kwargs: real_run(mutants, checks=SUITE[:2], **kwargs))
    assert [c.name for c in SUITE[:2]] == ["per_token_ragged", "per_token_topk_length"]
    ns = _parse(["selftest", "--only", "topk_length_ignored", "--quiet"])
    assert ns.handler(ns) == 0
    printed = capsys.readouterr().out
    assert "| check" in printed and "baseline: PASS" in printed
    assert "| topk_length_ignored" in printed and "per_token_topk_length" in printed
    assert "score: 1/1 (100%)" in printed


def test_cli_full_table_from_report(report, monkeypatch, capsys, tmp_path):
    import glmcheck.selftest.mutation_runs as runner

    monkeypatch.setattr(runner, "run_selftest", lambda mutants, **kwargs: report)
    ns = _parse(["selftest", "--mutants", "--quiet"])
    assert ns.handler(ns) == 0
    printed = capsys.readouterr().out
    for name in mutant_names():
        assert f"| {name}" in printed
    assert f"score: {len(CATALOGUE)}/{len(CATALOGUE)} (100%)" in printed
    # its record, as the library writes it: PASS only when every row passed (issue 68)
    from glmcheck.evaluate.selftest_kernels import selftest_suite

    selftest_suite(mutants=True).write(tmp_path / "r")
    assert_tampering_refused(tmp_path / "r", tmp_path, capsys)


def test_cli_rejects_unknown_mutant():
    with pytest.raises(SystemExit):
        _parse(["selftest", "--only", "no_such_mutant"])
