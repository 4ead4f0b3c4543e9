"""Input checks and normalisation for the sparse-MLA prefill entry points.

Every failure names the argument and what was expected: wrong dtypes raise TypeError (a packed FP8 KV cache must
never be read at a bf16 stride), wrong shapes, devices and sizes ValueError.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch

MAX_HEADS = 128


@dataclass(frozen=True)
class PrefillArgs:
    """Normalised kernel inputs: q [T, H, d_qk], kv [S, d_qk], indices [T, topk] int32."""

    q: torch.Tensor
    kv: torch.Tensor
    indices: torch.Tensor
    topk_length: torch.Tensor | None
    sm_scale: float
    d_v: int

    @property
    def num_tokens(self) -> int:
        return self.q.shape[0]

    @property
    def num_heads(self) -> int:
        return self.q.shape[1]

    @property
    def d_qk(self) -> int:
        return self.q.shape[2]

    @property
    def d_tail(self) -> int:
        return self.d_qk - self.d_v

    @property
    def topk(self) -> int:
        return self.indices.shape[1]

    @property
    def num_kv_rows(self) -> int:
        return self.kv.shape[0]


def _is_pow2(n: int) -> bool:
    return n > 0 and (n & (n - 1)) == 0


def _require_tensor(name: str, value: object) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    return value


def _require_dtype(name: str, tensor: torch.Tensor, dtype: torch.dtype, hint: str = "") -> None:
    if tensor.dtype != dtype:
        raise TypeError(f"{name} must be {dtype}, got {tensor.dtype}{hint}")


def _require_device(name: str, tensor: torch.Tensor, device: torch.device) -> None:
    if tensor.device != device:
        raise ValueError(f"{name} must be on {device} (the device of q), got {tensor.device}")


def check_indices(indices: object, num_tokens: int, device: torch.device) -> torch.Tensor:
    """Validate indices [T, topk] or [T, 1, topk] int32 on `device`; return the [T, topk] view."""
    indices = _require_tensor("indices", indices)
    _require_dtype("indices", indices, torch.int32)
    if indices.dim() == 3 and indices.shape[1] == 1:
        indices = indices[:, 0, :]
    if indices.dim() != 2:
        raise ValueError(f"indices must have shape [T, topk] or [T, 1, topk], got {tuple(indices.shape)}")
    if indices.shape[0] != num_tokens:
        raise ValueError(f"indices must have {num_tokens} rows (T of q), got {indices.shape[0]}")
    _require_device("indices", indices, device)
    return indices


def check_topk_length(topk_length: object, num_tokens: int, device: torch.device) -> torch.Tensor | None:
    """Validate topk_length [T] int32 on `device`, or None; returns it contiguous (the kernels read
    topk_length[t] at offset t)."""
    if topk_length is None:
        return None
    topk_length = _require_tensor("topk_length", topk_length)
    _require_dtype("topk_length", topk_length, torch.int32)
    if topk_length.dim() != 1 or topk_length.shape[0] != num_tokens:
        raise ValueError(f"topk_length must have shape [{num_tokens}], got {tuple(topk_length.shape)}")
    _require_device("topk_length", topk_length, device)
    return topk_length.contiguous()


def check_prefill_args(q: object, kv: object, indices: object, sm_scale: object, d_v: object,
                       topk_length: object) -> PrefillArgs:
    """Check the kernel contract (see glmcheck.kernels.sparse_mla_prefill) and normalise views."""
    q = _require_tensor("q", q)
    kv = _require_tensor("kv", kv)
    _require_dtype("q", q, torch.bfloat16)
    _require_dtype("kv", kv, torch.bfloat16, " (an FP8 or packed KV cache must be dequantised to bf16 first)")
    if q.dim() != 3:
        raise ValueError(f"q must have shape [T, H, d_qk], got {tuple(q.shape)}")
    num_tokens, num_heads, d_qk = q.shape
    if not 1 <= num_heads <= MAX_HEADS:
        raise ValueError(f"q must have 1..{MAX_HEADS} heads (dim 1), got {num_heads}")
    if kv.dim() == 3 and kv.shape[1] == 1:
        kv = kv[:, 0, :]
    if kv.dim() != 2:
        raise ValueError(f"kv must have shape [S, d_qk] or [S, 1, d_qk], got {tuple(kv.shape)}")
    if kv.shape[1] != d_qk:
        raise ValueError(f"kv must have d_qk = {d_qk} (the last dim of q), got {kv.shape[1]}")
    _require_device("kv", kv, q.device)
    if isinstance(d_v, bool) or not isinstance(d_v, int):
        raise TypeError(f"d_v must be an int, got {type(d_v).__name__}")
    if not (_is_pow2(d_v) and 16 <= d_v <= d_qk):
        raise ValueError(f"d_v must be a power of two in [16, d_qk={d_qk}], got {d_v}")
    d_tail = d_qk - d_v
    if d_tail != 0 and not _is_pow2(d_tail):
        raise ValueError(f"d_qk - d_v (the rope tail) must be 0 or a power of two, got {d_tail} "
                         f"(d_qk={d_qk}, d_v={d_v})")
    if isinstance(sm_scale, bool) or not isinstance(sm_scale, numbers.Real) \
            or not math.isfinite(sm_scale) or sm_scale <= 0:
        raise ValueError(f"sm_scale must be a positive finite float, got {sm_scale!r}")
    indices = check_indices(indices, num_tokens, q.device)
    topk_length = check_topk_length(topk_length, num_tokens, q.device)
    return PrefillArgs(q, kv, indices, topk_length, float(sm_scale), d_v)


def check_out(out: object, args: PrefillArgs) -> torch.Tensor:
    """Validate a caller-provided output [T, H, d_v] bf16 on q's device."""
    out = _require_tensor("out", out)
    _require_dtype("out", out, torch.bfloat16)
    expected = (args.num_tokens, args.num_heads, args.d_v)
    if tuple(out.shape) != expected:
        raise ValueError(f"out must have shape {list(expected)}, got {tuple(out.shape)}")
    _require_device("out", out, args.q.device)
    if not out.is_contiguous() and _overlaps(out):
        raise ValueError(f"out must not overlap itself (e.g. a view from .expand()), got strides {out.stride()}")
    # Byte spans intersecting: torch's own out= test, conservative for interleaved views of one buffer; pointers,
    # shapes and strides only (no host sync), out's span once: this runs on every call (host time).
    out_start, out_end = _byte_span(out)
    for name, tensor in (("q", args.q), ("kv", args.kv), ("indices", args.indices), ("topk_length", args.topk_length)):
        if tensor is None:
            continue
        start, end = _byte_span(tensor)
        if out_start < end and start < out_end:  # one device: _require_device checked out against q's
            raise ValueError(f"out must not overlap {name}: they share memory (bytes {_span_text(out)} and "
                             f"{_span_text(tensor)}), so the kernel would overwrite an input it still reads")
    return out


def _byte_span(tensor: torch.Tensor) -> tuple[int, int]:
    """[first, last + 1) bytes any element of `tensor` may occupy (empty for no elements); host-side only."""
    numel = tensor.numel()
    if numel == 0:
        return 0, 0
    start = tensor.data_ptr()
    if tensor.is_contiguous():
        return start, start + numel * tensor.element_size()
    last = sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))
    return start, start + (last + 1) * tensor.element_size()


def _span_text(tensor: torch.Tensor) -> str:
    start, end = _byte_span(tensor)
    return f"0x{start:x}..0x{end:x}"


def tensor_identity(tensor: torch.Tensor | None) -> tuple | None:
    """What a plan remembers of a tensor it was built from, read without a host sync: data pointer, shape,
    strides and the version counter (bumped by every in-place write through torch; None for inference
    tensors, which keep none)."""
    if tensor is None:
        return None
    try:
        version = tensor._version
    except RuntimeError:  # an inference tensor (torch.inference_mode) tracks no version
        version = None
    return tensor.data_ptr(), tuple(tensor.shape), tuple(tensor.stride()), version


def identity_difference(name: str, call: tuple | None, plan: tuple | None) -> str:
    """'' when `call` and `plan` (`tensor_identity`) name the same tensor state, else what differs, in words."""
    if call == plan:
        return ""
    if call is None or plan is None:
        state = {True: "absent", False: "given"}
        return f"{name} is {state[call is None]} in the call, {state[plan is None]} in the plan"
    for what, index, fmt in (("data_ptr", 0, hex), ("shape", 1, list), ("stride", 2, tuple)):
        if call[index] != plan[index]:
            return (f"{name} is another tensor than the plan was built from ({what} {fmt(call[index])} in the call, "
                    f"{fmt(plan[index])} in the plan)")
    return (f"{name} was written in place after the plan was built (version {call[3]} in the call, {plan[3]} in "
            f"the plan)")


def _overlaps(tensor: torch.Tensor) -> bool:
    """True when two elements of `tensor` may share memory: with its dims of size > 1 ordered by
    stride, each stride must exceed the span of the smaller dims (a sufficient test for no overlap)."""
    span = 0
    for stride, size in sorted((st, s) for s, st in zip(tensor.shape, tensor.stride()) if s > 1):
        if stride <= span:
            return True
        span += stride * (size - 1)
    return False


def valid_slot_mask(indices: torch.Tensor, num_kv_rows: int, topk_length: torch.Tensor | None) -> torch.Tensor:
    """Bool [T, topk]: the slot holds a row in [0, num_kv_rows) and lies below topk_length[t]."""
    valid = (indices >= 0) & (indices < num_kv_rows)
    if topk_length is not None:
        slot = torch.arange(indices.shape[1], device=indices.device)
        valid &= slot[None, :] < topk_length[:, None].to(slot.dtype)
    return valid


def check_contents(args: PrefillArgs) -> None:
    """Opt-in checks that need a host sync: finite q/kv, no KV row named twice in a token's row. Raises ValueError
    naming the argument and the first offending token."""
    for name, tensor in (("q", args.q), ("kv", args.kv)):
        finite = torch.isfinite(tensor)
        if not bool(finite.all()):
            where = (~finite).nonzero()[0].tolist()
            raise ValueError(f"{name} contains NaN or Inf (first at index {where})")
    check_no_duplicates(args.indices, args.num_kv_rows, args.topk_length)


def check_no_duplicates(indices: torch.Tensor, num_kv_rows: int, topk_length: torch.Tensor | None) -> None:
    """ValueError if a token's valid slots name the same KV row twice (top-k never does)."""
    if indices.numel() == 0:
        return
    valid = valid_slot_mask(indices, num_kv_rows, topk_length)
    keys = torch.where(valid, indices.long(), torch.full_like(indices, -1, dtype=torch.long))
    ordered = torch.sort(keys, dim=1).values
    repeated = (ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0)
    if bool(repeated.any()):
        token, slot = repeated.nonzero()[0].tolist()
        raise ValueError(f"indices row {token} names KV row {int(ordered[token, slot + 1])} twice "
                         f"(a token's selected rows must be distinct)")
