"""The kernel contract as a matrix of cases: each case against fp64 on a poisoned output, rerun
bitwise, with the tile that served it recorded (test_contract_matrix.py runs it).

A case fixes the head count, the union G asked for, topk, the KV addressing mode, the layout of
q / kv / indices / out, whether topk_length is given, and plants empty rows (a token with no valid
slot, a token with topk_length 0) and an empty group (eight adjacent tokens with no valid slot, so
every G in 2, 4, 8 sees a whole empty group). `run_case` checks:
  * every element of `out` written and finite, nothing outside it written (out is a view of a
    NaN-poisoned buffer in the strided layouts), empty tokens exactly zero;
  * rel-L2 and cosine against the fp64 reference (tests.support.checks gates);
  * a second run bitwise equal to the first;
  * the launches that happened are the tiles `kernel_route` names (the route printed is the one run).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
import torch

from glmcheck.backends.reference import sparse_mla_reference
from glmcheck.data.inputs import random_distinct_indices
from glmcheck.kernels import prefill
from glmcheck.kernels.gluon import launch as gluon_launch
from glmcheck.kernels.prefill import Route, kernel_route
from tests.support.checks import assert_close_to_reference

D_V, D_TAIL = 512, 64
HEADS = (1, 3, 8, 16, 17, 24, 32, 33, 48, 63, 64, 65, 96, 100, 127, 128)
UNIONS = (0, 2, 4, 8)
TOPKS = (7, 40, 130, 1000, 2048)
LAYOUTS = ("contiguous", "strided", "3d", "misaligned")
EMPTY_TOKEN, ZERO_LENGTH_TOKEN, EMPTY_GROUP = 3, 5, slice(16, 24)


@dataclass(frozen=True)
class Case:
    """One call of the contract: `tokens` tokens of `heads` heads, union G asked for (0 per-token),
    `topk` slots, int64 row addressing forced or not, a layout of LAYOUTS, topk_length or not."""

    heads: int
    union: int
    topk: int
    kv_int64: bool
    layout: str
    with_length: bool
    tokens: int = 37  # odd: every G leaves a tail of per-token tokens
    seed: int = 0

    @property
    def label(self) -> str:
        return (f"H={self.heads} u{self.union} topk={self.topk} {'int64' if self.kv_int64 else 'int32'} "
                f"{self.layout}{' +len' if self.with_length else ''} T={self.tokens}")


def matrix_cases() -> list[Case]:
    """Every head count with every union G, twice: once each with and without topk_length and in
    each addressing mode. topk and the layout rotate with the head count and G, so every head count
    meets every topk and layout, and so does every G."""
    cases = []
    for (h, heads), (u, union) in itertools.product(enumerate(HEADS), enumerate(UNIONS)):
        for flip in (0, 1):
            i = 4 * h + u
            cases.append(Case(heads, union, TOPKS[(i + 2 * flip) % len(TOPKS)], kv_int64=(u % 2 == 0) != flip,
                              layout=LAYOUTS[(h + u + 2 * flip) % len(LAYOUTS)],
                              with_length=((h + u // 2) % 2 == 0) != flip, seed=2 * i + flip))
    return cases


def cpu_cases() -> list[Case]:
    """A few small cases the CPU interpreter runs in seconds (the Triton tiles only)."""
    return [Case(8, 0, 40, False, "strided", True, tokens=26), Case(3, 0, 7, True, "3d", False, tokens=25),
            Case(8, 2, 40, True, "contiguous", True, tokens=27), Case(16, 2, 40, False, "misaligned", False, tokens=25),
            Case(8, 4, 7, False, "strided", False, tokens=25), Case(24, 0, 40, True, "contiguous", True, tokens=25)]


@dataclass
class CaseInputs:
    q: torch.Tensor
    kv: torch.Tensor
    indices: torch.Tensor
    topk_length: torch.Tensor | None
    out: torch.Tensor  # a view of a NaN-poisoned buffer
    guard: torch.Tensor  # the rest of that buffer: must stay NaN
    empty_tokens: list[int]


def _indices(case: Case, num_kv_rows: int, generator: torch.Generator) -> torch.Tensor:
    """[T, topk] int32: distinct rows per token, some slots -1 or out of range, planted empty rows."""
    rows = random_distinct_indices(case.tokens, case.topk, num_kv_rows, generator, empty_fraction=0.1)
    junk = torch.rand(rows.shape, generator=generator) < 0.05
    rows = torch.where(junk, torch.full_like(rows, num_kv_rows + 7), rows)
    rows[EMPTY_TOKEN] = -1
    rows[EMPTY_GROUP] = -3
    return rows


def _place(tensor: torch.Tensor, layout: str, pad: int) -> torch.Tensor:
    """`tensor` copied into the given layout: strided (a view into a wider buffer along the last dim
    and the first), misaligned (starts one element past a 16-byte boundary), else contiguous."""
    if layout == "strided":
        wide = torch.full((2 * tensor.shape[0] + 1, *tensor.shape[1:-1], tensor.shape[-1] + pad), -9,
                          dtype=tensor.dtype, device=tensor.device)
        view = wide[1::2, ..., :tensor.shape[-1]]
    elif layout == "misaligned":
        flat = torch.empty(tensor.numel() + 1, dtype=tensor.dtype, device=tensor.device)
        view = flat[1:].view(tensor.shape)
    else:
        return tensor.contiguous()
    view.copy_(tensor)
    return view


def make_case_inputs(case: Case, device: torch.device) -> CaseInputs:
    """Fresh N(0, 1) q / kv, indices and topk_length for `case`, laid out as it says (never zeros)."""
    generator = torch.Generator().manual_seed(1000 + case.seed)
    num_kv_rows = case.topk + 300
    q = torch.randn((case.tokens, case.heads, D_V + D_TAIL), generator=generator).to(torch.bfloat16)
    kv = torch.randn((num_kv_rows, D_V + D_TAIL), generator=generator).to(torch.bfloat16)
    indices = _indices(case, num_kv_rows, generator)
    empty = [EMPTY_TOKEN, *range(EMPTY_GROUP.start, EMPTY_GROUP.stop)]
    topk_length = None
    if case.with_length:
        topk_length = torch.randint(0, case.topk + 1, (case.tokens,), generator=generator, dtype=torch.int32)
        topk_length[0], topk_length[ZERO_LENGTH_TOKEN] = case.topk, 0
        empty.append(ZERO_LENGTH_TOKEN)
        topk_length = topk_length.to(device)
    q, kv, indices = q.to(device), kv.to(device), indices.to(device)
    out, guard = _poisoned_out(case, device)
    if case.layout == "3d":
        kv, indices = kv[:, None, :], indices[:, None, :]
    else:
        q, kv, indices = _place(q, case.layout, 64), _place(kv, case.layout, 64), _place(indices, case.layout, 5)
    return CaseInputs(q, kv, indices, topk_length, out, guard, empty)


def _poisoned_out(case: Case, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(out [T, H, D_V] in the case's layout, the rest of its NaN buffer): strided, a column slice
    of a wider buffer; misaligned, starting one element in; else the buffer's first elements."""
    shape = (case.tokens, case.heads, D_V)
    buffer = torch.full((case.tokens, case.heads, D_V + 64), float("nan"), dtype=torch.bfloat16, device=device)
    if case.layout == "strided":
        return buffer[..., :D_V], buffer[..., D_V:]
    flat, size = buffer.view(-1), case.tokens * case.heads * D_V
    start = 1 if case.layout == "misaligned" else 0
    return flat[start:start + size].view(shape), torch.cat([flat[:start], flat[start + size:]])


LAUNCHERS = {"triton-token": (prefill, "launch_per_token"), "triton-union": (prefill, "launch_union_attention"),
             "gluon-pingpong": (gluon_launch, "launch_pingpong")}


@contextmanager
def launch_spy() -> Iterator[list[str]]:
    """Record the tile name of every attention launch made inside the block, in order."""
    launched: list[str] = []

    def spy(name: str, real):
        def launch(*args, **kwargs):
            launched.append(name)
            return real(*args, **kwargs)
        return launch

    with pytest.MonkeyPatch.context() as patch:
        for name, (module, attr) in LAUNCHERS.items():
            patch.setattr(module, attr, spy(name, getattr(module, attr)))
        yield launched


def _call(case: Case, x: CaseInputs, out: torch.Tensor) -> torch.Tensor:
    return prefill.prefill_forced(x.q, x.kv, x.indices, (D_V + D_TAIL) ** -0.5, D_V, topk_length=x.topk_length,
                                  out=out, union=case.union, kv_int64=case.kv_int64)


def run_case(case: Case, device: torch.device) -> Route:
    """Run one case with every check of the module docstring; returns the route that served it."""
    x = make_case_inputs(case, device)
    route = kernel_route(x.q, x.kv, x.indices, (D_V + D_TAIL) ** -0.5, D_V, topk_length=x.topk_length,
                         union=case.union)
    with launch_spy() as launched:
        result = _call(case, x, x.out)
    assert result.data_ptr() == x.out.data_ptr()
    expected = {route.tile} | ({route.tail} if route.tail else set())
    assert set(launched) == expected, f"{case.label}: route {route} but launched {launched}"
    assert torch.isfinite(x.out).all(), f"{case.label}: unwritten or non-finite outputs"
    assert x.guard.isnan().all(), f"{case.label}: wrote outside out"
    assert (x.out[x.empty_tokens] == 0).all(), f"{case.label}: a token with no valid slot is not zero"
    reference = sparse_mla_reference(x.q, x.kv, x.indices, (D_V + D_TAIL) ** -0.5, D_V, topk_length=x.topk_length)
    assert_close_to_reference(x.out, reference)
    again = torch.full_like(x.out, float("nan"))
    _call(case, x, again)
    assert torch.equal(again, x.out), f"{case.label}: a rerun differs"
    return route


def describe(route: Route) -> str:
    """`tile` (G = g) [+ tail tile], one line."""
    text = route.tile if route.group == 1 else f"{route.tile} G={route.group}"
    return text + (f" + tail {route.tail}" if route.tail else "")
