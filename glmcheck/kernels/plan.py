"""Plans: the index work of a prefill call, built once and reused by every call with the same indices.

`plan_sparse_mla(indices, num_kv_rows=S, num_heads=H, topk_length=..., union=G)` chooses the path (union group G or
per-token) and builds what that path derives from the indices alone: the union sets of each group of G tokens, or,
from PINGPONG_MIN_HEADS heads on a GPU, each token's compacted rows. `sparse_mla_prefill(..., plan=plan)` then runs
the attention only. The plan lives on the indices' device; building it needs no host sync, so it can be captured in
a CUDA graph. A plan is immutable: reuse it only for calls whose indices (and topk_length) are the ones it was built
from. The call checks shapes, device, KV rows and heads, and, without reading the values (no host sync), that its
indices and topk_length are the very tensors the plan was built from, unchanged: the same data pointer, shape and
strides, and the same version counter (torch bumps it on every in-place write; an inference tensor has none, and a
write by a custom kernel bypasses it). The plan holds a reference to both, so their memory cannot be reused by
other tensors while it lives. The plan fixes the path and G; the tile is chosen per call, since it also depends on
q and kv (dims, alignment): `kernel_route` names it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from glmcheck.kernels.union import UnionSets, build_union_sets, log_fallback_once, token_row_sets, union_is_legal
from glmcheck.kernels.validate import MAX_HEADS, check_indices, check_topk_length, identity_difference, tensor_identity

# From this many heads the per-token path runs the ping-pong tile per 64-head slice (padded): one slice costs ~3.73 ms
# at 1 x 8192, the Triton tile 3.27 at 16 heads and 4.89 at 32 (docs/performance.md, "Per-token tiles by head count").
PINGPONG_MIN_HEADS = 17
UNION_GROUPS = (0, 2, 4, 8)  # the `union` a call may ask for: 0 per-token, else the group size G


def union_group(num_heads: int, num_tokens: int, union: int, deterministic: bool) -> int:
    """The union group G a call runs, or 0 for the per-token path (illegal requests fall back)."""
    if isinstance(union, bool) or not isinstance(union, int) or union not in UNION_GROUPS:
        raise ValueError(f"union must be 0 (per-token) or G = 2, 4 or 8 (adjacent tokens sharing one gather), got "
                         f"{union!r}")
    if union == 0 or deterministic:  # deterministic: a token's output must not depend on its group
        return 0
    if not union_is_legal(num_heads, union):
        log_fallback_once(num_heads, union, "G*H must be a power of two in [16, 64]")
        return 0
    return union if num_tokens >= union else 0


@dataclass(frozen=True)
class SparseMLAPlan:
    """What one set of indices [T, topk] decides for calls with S KV rows and H heads: `group` (0: per-token),
    `union_sets` (group > 0) or `token_sets` (per-token path on the ping-pong tile, else None), on `device`."""

    num_tokens: int
    topk: int
    num_kv_rows: int
    num_heads: int
    has_length: bool
    union: int
    deterministic: bool
    group: int
    device: torch.device
    union_sets: UnionSets | None = None
    token_sets: UnionSets | None = None
    indices_identity: tuple | None = None  # `tensor_identity` of the indices [T, topk] it was built from
    length_identity: tuple | None = None  # of the topk_length passed (None: none)
    sources: tuple = field(default=(), repr=False, compare=False)  # those tensors, kept alive

    def check_matches(self, args, union: int, deterministic: bool, topk_length: torch.Tensor | None = None) -> None:
        """ValueError naming the first field where a call (checked PrefillArgs; `topk_length` as the caller passed
        it, default args.topk_length) differs from the plan, the identity of its indices and topk_length too."""
        fields = (("num_tokens (T)", args.num_tokens, self.num_tokens), ("topk", args.topk, self.topk),
                  ("num_kv_rows (S)", args.num_kv_rows, self.num_kv_rows),
                  ("num_heads (H)", args.num_heads, self.num_heads),
                  ("topk_length given", args.topk_length is not None, self.has_length),
                  ("device", args.q.device, self.device))
        for key, call, mine in fields:
            if call != mine:
                raise ValueError(f"plan does not match the call: {key} is {call} in the call, {mine} in the plan")
        if self.indices_identity is not None:
            lengths = args.topk_length if topk_length is None else topk_length
            why = identity_difference("indices", tensor_identity(args.indices), self.indices_identity) \
                or identity_difference("topk_length", tensor_identity(lengths), self.length_identity)
            if why:
                raise ValueError(f"plan does not match the call: {why}")
        if union not in (0, self.union) or (deterministic and not self.deterministic and self.group):
            raise ValueError(f"plan was built for union={self.union}, deterministic={self.deterministic}; the call "
                             f"asks union={union}, deterministic={deterministic} (leave them out with a plan)")


def plan_sparse_mla(indices: torch.Tensor, *, num_kv_rows: int, num_heads: int,
                    topk_length: torch.Tensor | None = None, union: int = 0,
                    deterministic: bool = False) -> SparseMLAPlan:
    """Build the plan of `indices` [T, topk] (or [T, 1, topk]) int32 for calls with `num_kv_rows` KV rows and
    `num_heads` heads; `topk_length` [T] int32 or None as the calls will pass it. See the module docstring."""
    if not isinstance(indices, torch.Tensor):
        raise TypeError(f"indices must be a torch.Tensor, got {type(indices).__name__}")
    for name, value, low in (("num_kv_rows", num_kv_rows, 0), ("num_heads", num_heads, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    if num_heads > MAX_HEADS:  # no call could use the plan: the kernel takes 1..MAX_HEADS heads
        raise ValueError(f"num_heads must be at most {MAX_HEADS} (the kernel takes 1..{MAX_HEADS} heads), got "
                         f"{num_heads}")
    indices = check_indices(indices, indices.shape[0] if indices.dim() else 0, indices.device)
    given_length = topk_length
    topk_length = check_topk_length(topk_length, indices.shape[0], indices.device)
    tokens, topk = indices.shape
    group = union_group(num_heads, tokens, union, deterministic)
    union_sets = token_sets = None
    if group:
        union_sets = build_union_sets(indices, group, topk_length, num_kv_rows)
    elif num_heads >= PINGPONG_MIN_HEADS and indices.device.type == "cuda":
        token_sets = token_row_sets(indices, topk_length, num_kv_rows)
    return SparseMLAPlan(tokens, topk, num_kv_rows, num_heads, topk_length is not None, union, deterministic, group,
                         indices.device, union_sets, token_sets, tensor_identity(indices),
                         tensor_identity(given_length), (indices, given_length))
