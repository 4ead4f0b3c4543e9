"""Mutant catalogue and the machinery that builds a mutated copy of `glmcheck.kernels`.

A mutant is one exact source edit (file, snippet, replacement) planting a realistic kernel
fault. `mutated_kernels(mutant)` copies every `glmcheck/kernels/**/*.py` into a fresh package
with a unique name in a temporary directory, rewrites the `glmcheck.kernels` imports to that
name, applies the edit and imports the copy (Triton's @triton.jit reads kernel source through
inspect, so the copy must be real files, not exec'd strings). The real package is never
touched. A snippet that does not occur exactly once raises MutantError, so a refactor of the
kernels cannot silently turn a mutant into a no-op.
"""

from __future__ import annotations

import importlib
import itertools
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

PACKAGE_PREFIX = "glmcheck_mutant_"
WRAP_ELEMENTS = 2**16  # emulated int32 wrap of the int32-overflow mutant (see INT32_WRAP)

_REAL_NAME = re.compile(r"\bglmcheck\.kernels\b")
_counter = itertools.count()


class MutantError(ValueError):
    """A mutant cannot be built: file missing, snippet not found exactly once, bad result."""


@dataclass(frozen=True)
class Mutant:
    """One planted fault: replace `snippet` (must occur exactly once) in kernels/`file` (a path
    relative to the kernels package)."""

    name: str
    breaks: str
    file: str
    snippet: str
    replacement: str
    note: str = ""


INT32_WRAP = Mutant(
    name="int32_offset_wrap",
    breaks="int32 KV row offsets overflow in the shared row gather (emulated: wrap at 2**16)",
    file="device_helpers.py",
    snippet="row_off = rows * stride_kvs",
    replacement=f"row_off = (rows * stride_kvs) % {WRAP_ELEMENTS}",
    note="EMULATION. The real fault is int32 row addressing (rows * stride) on a KV cache of "
         "S * d_qk >= 2**31 elements, where the product wraps and reads the wrong rows. The CPU "
         "interpreter cannot hold such a cache, so the mutant makes the same int32 product wrap "
         "at 2**16 instead, and the suite reads a KV of S * d_qk >= 65536 elements (1024 rows of "
         "80). Wrapping only makes offsets smaller, so the wrong rows still lie inside the "
         "buffer: no out-of-bounds read, just wrong values, as on the GPU.",
)

CATALOGUE: tuple[Mutant, ...] = (
    Mutant("ownership_ignored", "union attention scores every union row for every token of the group",
           "union_attention.py",
           'return tl.where(owned & live[None, :], scores * qk_scale_log2, float("-inf"))',
           'return tl.where(live[None, :], scores * qk_scale_log2, float("-inf"))'),
    Mutant("tail_dropped", "tail tokens (T mod G) never handed to the per-token path",
           "prefill.py",
           "if done < args.num_tokens:",
           "if False and done < args.num_tokens:"),
    Mutant("search_off_by_one", "union build's binary search misses a row in the last sorted slot",
           "union_search.py",
           "inside = lo < count",
           "inside = lo < count - 1"),
    Mutant("duplicate_row", "union build emits a shared row again for a later token (weighted twice)",
           "union_search.py",
           "emit = emit & (~found)",
           "emit = emit  # mutant: rows of earlier tokens are emitted again"),
    Mutant("merge_bits_short", "merged-sort build ORs one neighbour too few (the last owner's bit lost)",
           "union_merge.py",
           "for ahead in tl.static_range(G):",
           "for ahead in tl.static_range(G - 1):"),
    Mutant("merge_copies_emitted", "merged-sort build emits every copy of a row, not only the first",
           "union_merge.py",
           "first = live & ((~has_prev) | ((prev >> LOG2_G) != row))",
           "first = live"),
    Mutant("tree_bits_lost", "tree build drops the other half's ownership bits of a shared row",
           "union_tree.py",
           "bits = bits | other",
           "bits = bits  # mutant: other half's bits lost"),
    Mutant("anchor_shared_bits_lost", "anchor build leaves a row both tokens hold with the anchor's bit only",
           "union_anchor.py",
           "tl.full([BLOCK], 3, dtype=tl.uint8), mask=found)",
           "tl.full([BLOCK], 1, dtype=tl.uint8), mask=found)"),
    Mutant("marks_bits_overwritten", "marks build stores a token's bit over the earlier tokens' instead of ORing it",
           "union_marks.py",
           "tl.store(marks + row, seen | (1 << member), mask=valid)",
           "tl.store(marks + row, (seen & 0) | (1 << member), mask=valid)"),
    Mutant("prefix_owner_short", "marks build's prefix guard gives each token its rows but its last",
           "union_marks.py",
           "tl.where(row[:, None] <= highs[None, :], 1 << members[None, :], 0)",
           "tl.where(row[:, None] < highs[None, :], 1 << members[None, :], 0)"),
    Mutant("rope_tail_dropped", "per-token kernel skips the rope-tail dot",
           "per_token.py",
           "if D_TAIL > 0:",
           "if D_TAIL < 0:"),
    Mutant("softmax_scale_no_log2e", "per-token launcher forgets log2(e) of the base-2 softmax",
           "prefill.py",
           "args.sm_scale * LOG2E,",
           "args.sm_scale,"),
    Mutant("empty_slot_as_row0", "per-token kernel reads -1 slots as KV row 0",
           "per_token.py",
           "valid = in_len & (rows >= 0) & (rows < num_kv_rows)",
           "rows = tl.where(rows == -1, 0, rows)\n"
           "        valid = in_len & (rows >= 0) & (rows < num_kv_rows)"),
    Mutant("topk_length_ignored", "per-token kernel loops to topk, not to topk_length[t]",
           "per_token.py",
           "length = tl.minimum(tl.maximum(length, 0), topk)",
           "length = topk"),
    INT32_WRAP,
)


def mutant_names() -> list[str]:
    """Names of the catalogued mutants, in catalogue order."""
    return [m.name for m in CATALOGUE]


def find_mutant(name: str) -> Mutant:
    """The catalogued mutant called `name`; ValueError naming the known ones otherwise."""
    for mutant in CATALOGUE:
        if mutant.name == name:
            return mutant
    raise ValueError(f"unknown mutant {name!r}; known: {', '.join(mutant_names())}")


def real_kernels_dir() -> Path:
    """Directory of the real `glmcheck.kernels` package."""
    import glmcheck.kernels

    return Path(glmcheck.kernels.__file__).parent


def apply_mutation(source: str, mutant: Mutant) -> str:
    """`source` with the mutant's snippet replaced; MutantError unless it occurs exactly once."""
    found = source.count(mutant.snippet)
    if found != 1:
        raise MutantError(f"mutant {mutant.name}: snippet {mutant.snippet!r} occurs {found} times in "
                          f"{mutant.file} (expected exactly once); update the catalogue")
    if mutant.replacement == mutant.snippet:
        raise MutantError(f"mutant {mutant.name}: replacement equals the snippet (a no-op)")
    return source.replace(mutant.snippet, mutant.replacement)


def rename_package(source: str, package: str) -> str:
    """`source` with every `glmcheck.kernels` reference pointing at `package` instead."""
    return _REAL_NAME.sub(package, source)


def write_mutated_package(mutant: Mutant, root: Path, package: str,
                          source_dir: Path | None = None) -> Path:
    """Write the kernels, renamed to `package` and with the mutation applied, under root/package."""
    source_dir = source_dir or real_kernels_dir()
    target = source_dir / mutant.file
    if not target.is_file():
        raise MutantError(f"mutant {mutant.name}: {target} does not exist")
    package_dir = root / package
    package_dir.mkdir()
    for path in sorted(source_dir.rglob("*.py")):
        relative = path.relative_to(source_dir)
        text = path.read_text()
        if relative.as_posix() == mutant.file:
            text = apply_mutation(text, mutant)
        text = rename_package(text, package)
        target_path = package_dir / relative
        try:
            compile(text, str(target_path), "exec")
        except SyntaxError as err:
            raise MutantError(f"mutant {mutant.name}: {relative} no longer compiles: {err}") from err
        target_path.parent.mkdir(parents=True, exist_ok=True)
        target_path.write_text(text)
    return package_dir


def _forget(package: str, root: str) -> None:
    """Drop the package and its submodules from sys.modules and its root from sys.path."""
    for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
        del sys.modules[name]
    while root in sys.path:
        sys.path.remove(root)
    importlib.invalidate_caches()


@contextmanager
def mutated_kernels(mutant: Mutant, source_dir: Path | None = None) -> Iterator[ModuleType]:
    """Import a mutated copy of the kernels package; removed again on exit.

    Yields the copy's package module (it has `sparse_mla_prefill` and `union.union_dedup_forced`).
    """
    package = f"{PACKAGE_PREFIX}{mutant.name}_{next(_counter)}"
    with tempfile.TemporaryDirectory(prefix="glmcheck-mutant-") as tmp:
        write_mutated_package(mutant, Path(tmp), package, source_dir)
        sys.path.insert(0, tmp)
        try:
            importlib.invalidate_caches()
            yield importlib.import_module(package)
        finally:
            _forget(package, tmp)
