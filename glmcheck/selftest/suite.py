"""The accuracy suite of the mutation self-test: small CPU-sized kernel checks.

Each check takes an implementation (anything with `sparse_mla_prefill` and `union.union_dedup_forced`, e.g.
the real `glmcheck.kernels` or a mutated copy) and a seed, draws fresh inputs (on the CPU in
Triton's interpreter, on CUDA otherwise), runs the kernel into a NaN-poisoned output and
returns an Outcome. Accuracy gates are those of the kernel
tests: rel-L2 <= 3e-3 and cosine >= 0.99999 against the fp64 reference. Exact checks (union
sets, bitwise equality) have threshold 0. `margin` says how far past the gate a value is:
measured / threshold (below 1 passes); an exact check that fails, or a non-finite output, has
margin inf.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from glmcheck.backends.reference import sparse_mla_reference
from glmcheck.checks import metrics
from glmcheck.data.indices import drifting_indices
from glmcheck.data.inputs import poisoned_out, random_inputs, random_qkv
from glmcheck.kernels.runtime import interpreter_active

REL_L2_GATE = 3e-3
COSINE_GATE = 0.99999
HEADS, D_V, D_TAIL = 8, 64, 16
D_QK = D_V + D_TAIL
LARGE_KV_ROWS = 1024  # LARGE_KV_ROWS * D_QK >= 2**16: the emulated int32 wrap reads wrong rows
UNION_TOKENS, UNION_TOPK, UNION_WARMUP = 35, 32, 64  # 35 mod 2 = 1, 35 mod 4 = 3 tail tokens

Impl = Any  # module-like: .sparse_mla_prefill(...) and .union.union_dedup_forced(...)


@dataclass(frozen=True)
class Outcome:
    """Result of one check on one implementation."""

    name: str
    passed: bool
    measured: float
    threshold: float
    margin: float
    detail: str
    crashed: bool = False


@dataclass(frozen=True)
class Check:
    """A named check: `run(impl, seed)` returns its Outcome."""

    name: str
    what: str
    run: Callable[[Impl, int], Outcome]


def gate_margin(measured: float, threshold: float) -> float:
    """measured / threshold; inf for NaN or a nonzero value against an exact (0) threshold."""
    if math.isnan(measured):
        return math.inf
    if threshold > 0:
        return measured / threshold
    return 0.0 if measured == 0 else math.inf


def outcome(name: str, passed: bool, measured: float, threshold: float, detail: str) -> Outcome:
    """An Outcome with its margin computed from measured and threshold."""
    return Outcome(name, passed, measured, threshold, gate_margin(measured, threshold), detail)


def crashed(name: str, err: Exception) -> Outcome:
    """The Outcome of a check whose implementation raised."""
    message = str(err).splitlines()[0] if str(err) else ""
    return Outcome(name, False, math.nan, 0.0, math.inf, f"raised {type(err).__name__}: {message}", True)


# ---- comparisons ------------------------------------------------------------------------

def fp64_outcome(name: str, out: torch.Tensor, ref: torch.Tensor) -> Outcome:
    """Gate `out` against the fp64 reference: finite, rel-L2 and cosine (the failing one reported)."""
    bad = int((~torch.isfinite(out)).sum())
    if bad:
        return outcome(name, False, math.nan, REL_L2_GATE, f"{bad}/{out.numel()} elements NaN/Inf")
    rel, cos = metrics.rel_l2(out, ref), metrics.cosine(out, ref)
    detail = f"rel-L2 {rel:.3e}, cosine {cos:.8f} vs fp64"
    if rel > REL_L2_GATE or cos >= COSINE_GATE:
        return outcome(name, rel <= REL_L2_GATE, rel, REL_L2_GATE, detail)
    return outcome(name, False, 1.0 - cos, 1.0 - COSINE_GATE, detail + " (1 - cosine past its gate)")


def differing(a: torch.Tensor, b: torch.Tensor) -> int:
    """Elements of a and b that are not bitwise-equal values (a NaN never equals anything)."""
    return int((a != b).sum())


def exact_outcome(name: str, mismatches: int, total: int, what: str) -> Outcome:
    """An exact check: `mismatches` of `total` items differ (threshold 0)."""
    detail = f"{mismatches}/{total} {what} differ" if mismatches else f"all {total} {what} equal"
    return outcome(name, mismatches == 0, float(mismatches), 0.0, detail)


# ---- inputs and calls -------------------------------------------------------------------

def suite_device() -> torch.device:
    """Where the kernels run: CUDA unless Triton's CPU interpreter is active."""
    return torch.device("cuda" if torch.cuda.is_available() and not interpreter_active() else "cpu")


def run_prefill(impl: Impl, q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, sm_scale: float,
                **kwargs: Any) -> torch.Tensor:
    """impl.sparse_mla_prefill into a NaN-poisoned output (unwritten elements show)."""
    out = poisoned_out(q.shape[0], q.shape[1], D_V, q.device)
    impl.sparse_mla_prefill(q, kv, indices, sm_scale, D_V, out=out, **kwargs)
    return out


def reference(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, sm_scale: float,
              topk_length: torch.Tensor | None = None) -> torch.Tensor:
    """The fp64 reference of the same call."""
    return sparse_mla_reference(q, kv, indices, sm_scale, D_V, topk_length=topk_length)


def random_lengths(tokens: int, topk: int, seed: int) -> torch.Tensor:
    """topk_length [T] int32 in [0, topk], the first three 0, topk and topk // 4."""
    lengths = torch.randint(0, topk + 1, (tokens,), generator=torch.Generator().manual_seed(seed),
                            dtype=torch.int32)
    lengths[:3] = torch.tensor([0, topk, topk // 4], dtype=torch.int32)
    return lengths.to(suite_device())


def overlapping_indices(seed: int) -> tuple[torch.Tensor, int]:
    """(indices [35, 32], S): drifting top-k (20% swaps) plus 10% empty or out-of-range slots.

    Adjacent tokens share most rows but not all, as in real prefill.
    """
    seq_len = UNION_WARMUP + UNION_TOKENS
    base = drifting_indices([seq_len], UNION_TOPK, 0.2, seed=seed)[-UNION_TOKENS:]
    gen = torch.Generator().manual_seed(seed + 1)
    dirty = torch.rand(base.shape, generator=gen) < 0.1
    junk = torch.randint(seq_len, seq_len + 100, base.shape, generator=gen, dtype=torch.int32)
    junk[::2] = -1
    junk[::3] = -7
    return torch.where(dirty, junk, base).to(suite_device()), seq_len


def union_inputs(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]:
    """(q, kv, indices, sm_scale) on overlapping selections for the union checks."""
    indices, kv_rows = overlapping_indices(seed)
    q, kv = random_qkv(UNION_TOKENS, HEADS, kv_rows, D_V, D_TAIL, torch.Generator().manual_seed(seed),
                       suite_device())
    return q, kv, indices, D_QK ** -0.5


# ---- the checks -------------------------------------------------------------------------

def check_per_token_ragged(impl: Impl, seed: int) -> Outcome:
    """Per-token path, 40% of the slots -1 scattered through each row, vs fp64."""
    inp = random_inputs(29, HEADS, 160, 64, D_V, D_TAIL, seed=seed + 11, empty_fraction=0.4,
                        device=suite_device())
    out = run_prefill(impl, inp.q, inp.kv, inp.indices, inp.sm_scale)
    return fp64_outcome("per_token_ragged", out, reference(inp.q, inp.kv, inp.indices, inp.sm_scale))


def check_per_token_topk_length(impl: Impl, seed: int) -> Outcome:
    """Per-token path with topk_length cutting below the valid slots, vs fp64."""
    inp = random_inputs(27, HEADS, 160, 64, D_V, D_TAIL, seed=seed + 12, empty_fraction=0.2,
                        device=suite_device())
    lengths = random_lengths(27, 64, seed + 13)
    out = run_prefill(impl, inp.q, inp.kv, inp.indices, inp.sm_scale, topk_length=lengths)
    ref = reference(inp.q, inp.kv, inp.indices, inp.sm_scale, lengths)
    return fp64_outcome("per_token_topk_length", out, ref)


def check_per_token_out_of_range(impl: Impl, seed: int) -> Outcome:
    """Slots >= S or < -1 behave as -1: vs fp64 of the cleaned call, and bitwise equal to it."""
    name, (tokens, kv_rows, topk) = "per_token_out_of_range", (23, 120, 64)
    inp = random_inputs(tokens, HEADS, kv_rows, topk, D_V, D_TAIL, seed=seed + 14, device=suite_device())
    gen = torch.Generator().manual_seed(seed + 15)
    bad = torch.rand((tokens, topk), generator=gen) < 0.3
    junk = torch.randint(kv_rows, 2**31 - 1, (tokens, topk), generator=gen, dtype=torch.int32)
    junk[::2] = torch.randint(-2**31, -1, junk[::2].shape, generator=gen, dtype=torch.int32)
    bad, junk = bad.to(inp.indices.device), junk.to(inp.indices.device)
    dirty = torch.where(bad, junk, inp.indices)
    clean = torch.where(bad, torch.full_like(inp.indices, -1), inp.indices)
    out_dirty = run_prefill(impl, inp.q, inp.kv, dirty, inp.sm_scale)
    result = fp64_outcome(name, out_dirty, reference(inp.q, inp.kv, clean, inp.sm_scale))
    if not result.passed:
        return result
    out_clean = run_prefill(impl, inp.q, inp.kv, clean, inp.sm_scale)
    return exact_outcome(name, differing(out_dirty, out_clean), out_dirty.numel(),
                         "elements of the out-of-range call and the -1 call")


def check_per_token_large_kv(impl: Impl, seed: int) -> Outcome:
    """Per-token path on a KV of 1024 x 80 = 81920 >= 2**16 elements (rows past the wrap), vs fp64."""
    inp = random_inputs(24, HEADS, LARGE_KV_ROWS, 64, D_V, D_TAIL, seed=seed + 16, device=suite_device())
    out = run_prefill(impl, inp.q, inp.kv, inp.indices, inp.sm_scale)
    return fp64_outcome("per_token_large_kv", out, reference(inp.q, inp.kv, inp.indices, inp.sm_scale))


def union_check(group: int) -> Callable[[Impl, int], Outcome]:
    """Union path with G = `group`, odd T (tail tokens), overlapping unequal selections, vs fp64."""
    def run(impl: Impl, seed: int) -> Outcome:
        q, kv, indices, scale = union_inputs(seed + 20 + group)
        out = run_prefill(impl, q, kv, indices, scale, union=group)
        return fp64_outcome(f"union_g{group}", out, reference(q, kv, indices, scale))
    return run


def python_union(indices: torch.Tensor, group: int, kv_rows: int,
                 lengths: torch.Tensor | None) -> list[dict[int, int]]:
    """Per group of G tokens: {row: ownership bits} over the valid slots (plain Python)."""
    groups = []
    for g in range(indices.shape[0] // group):
        owners: dict[int, int] = {}
        for member in range(group):
            token = g * group + member
            limit = indices.shape[1] if lengths is None else int(lengths[token])
            for slot, row in enumerate(indices[token].tolist()):
                if slot < limit and 0 <= row < kv_rows:
                    owners[row] = owners.get(row, 0) | (1 << member)
        groups.append(owners)
    return groups


def union_mismatches(sets: Any, expected: list[dict[int, int]]) -> int:
    """Groups whose union rows (each once) and ownership bits differ from `expected`."""
    lengths = sets.lengths.cpu().tolist()
    if len(lengths) != len(expected):
        return max(len(lengths), len(expected))
    bad = 0
    for g, owners in enumerate(expected):
        rows = sets.rows[g, :lengths[g]].cpu().tolist()
        bits = sets.bits[g, :lengths[g]].cpu().tolist()
        bad += len(rows) != len(set(rows)) or dict(zip(rows, bits)) != owners
    return bad


def check_union_dedup(impl: Impl, seed: int) -> Outcome:
    """union_dedup (G = 2 and 4, every build method) vs a Python set/dict, rows and ownership bits: on overlapping
    selections with topk_length, and on two sequences in one pool whose first tokens select their causal prefix
    (the marks build's prefix guard, which only that build has; the second sequence's from a row past 0). It stops
    at the first build with a mismatch: a mutant is caught there, and the builds after it cost the interpreter
    seconds each (the baseline runs them all)."""
    indices, kv_rows = overlapping_indices(seed + 30)
    lengths = random_lengths(indices.shape[0], indices.shape[1], seed + 31)
    prefixes = drifting_indices([UNION_TOPK + 4] * 2, UNION_TOPK, 0.2, seed=seed + 32).to(indices.device)
    every_build = ("marks", "merge", "tree", "search")
    cases = (("overlapping", indices, kv_rows, lengths, every_build),
             ("prefix", prefixes, prefixes.shape[0], None, ("marks",)))
    bad = total = 0
    for group in (2, 4):
        for label, case_indices, case_rows, case_lengths, builds in cases:
            expected = python_union(case_indices.cpu(), group, case_rows,
                                    None if case_lengths is None else case_lengths.cpu())
            for method in builds + (("anchor",) if group == 2 and len(builds) > 1 else ()):
                sets = impl.union.union_dedup_forced(case_indices, group, case_lengths, num_kv_rows=case_rows,
                                                     method=method)
                bad, total = bad + union_mismatches(sets, expected), total + len(expected)
                if bad:
                    return exact_outcome("union_dedup", bad, total,
                                         f"groups (up to the G={group} {method} build on the {label} selections, "
                                         "the first that differs)")
    return exact_outcome("union_dedup", bad, total,
                         "groups (G=2 and G=4; marks, merge, tree, search builds; anchor at G=2)")


def check_determinism(impl: Impl, seed: int) -> Outcome:
    """Two runs bitwise equal: per-token (ragged, topk_length) and union G=2."""
    inp = random_inputs(17, HEADS, 96, 48, D_V, D_TAIL, seed=seed + 40, empty_fraction=0.3,
                        device=suite_device())
    lengths = random_lengths(17, 48, seed + 41)
    calls = [dict(topk_length=lengths), dict(union=2)]
    bad = total = 0
    for kwargs in calls:
        first = run_prefill(impl, inp.q, inp.kv, inp.indices, inp.sm_scale, **kwargs)
        second = run_prefill(impl, inp.q, inp.kv, inp.indices, inp.sm_scale, **kwargs)
        bad, total = bad + differing(first, second), total + first.numel()
    return exact_outcome("determinism", bad, total, "elements of two identical runs")


SUITE: tuple[Check, ...] = (
    Check("per_token_ragged", "per-token, ragged -1 padding, vs fp64", check_per_token_ragged),
    Check("per_token_topk_length", "per-token, topk_length below the valid slots, vs fp64",
          check_per_token_topk_length),
    Check("per_token_out_of_range", "per-token, slots >= S or < -1 equal -1 slots (fp64 + bitwise)",
          check_per_token_out_of_range),
    Check("per_token_large_kv", "per-token, S*d_qk = 81920 >= 2**16, vs fp64", check_per_token_large_kv),
    # The build is checked before the attention that consumes it: a broken build can leave rows
    # unwritten, and attention gathering such rows would crash (on a GPU: an illegal address that
    # ends the process's CUDA context) instead of failing a check.
    Check("union_dedup", "union build vs Python sets: rows and ownership bits", check_union_dedup),
    Check("union_g2", "union G=2, odd T, overlapping selections, vs fp64", union_check(2)),
    Check("union_g4", "union G=4, odd T, overlapping selections, vs fp64", union_check(4)),
    Check("determinism", "two runs bitwise equal (per-token and union)", check_determinism),
)


def run_check(check: Check, impl: Impl, seed: int = 0) -> Outcome:
    """Run one check; an exception from the implementation is a failed (crashed) Outcome."""
    try:
        return check.run(impl, seed)
    except Exception as err:  # noqa: BLE001 - a crashing implementation fails the check
        return crashed(check.name, err)
