"""Faults with a structure the diagnosis should name, each wrapping a base kernel (`glmcheck.checks.diagnosis`).

The planted faults of `glmcheck.selftest.faults` call the kernel under test; `rebased` gives any of them another
base kernel (on the CPU a band variant held out of the band, as the power curves do, so the interpreter's minutes a
forward are not spent). The kinds below add one structure each that those do not have:

- `heads_scaled`     a few heads (2 and 5) at softmax scale x 1.5;
- `every_nth_token`  tokens t = 3 mod 4 (a union group of 4's last member) drop their last valid slot;
- `onset_scaled`     tokens from position `start` on at softmax scale x 1.1 (a second tile's scale);
- `rows_wrapped`     KV rows r >= `bound` read as row r - bound (an offset that wraps);
- `window_dropped`   rows `window` or more positions behind the token ignored (a window bound);
- `dims_scaled`      output dims [a, b) times 0.95 (one block of the output written wrong);
- `temperature`      the softmax scale x 0.997;
- `full_first_dropped` the tokens with every slot valid ignore their first slot (a full tile's first row).
"""

from __future__ import annotations

import types
from collections.abc import Callable

import torch

from glmcheck.kernels.validate import valid_slot_mask

KernelFn = Callable[..., torch.Tensor]


def rebased(fn: KernelFn, base: KernelFn) -> KernelFn:
    """A planted fault of `glmcheck.selftest.faults` (which calls `sparse_mla_prefill`) calling `base` instead."""
    scope = dict(fn.__globals__)
    scope["sparse_mla_prefill"] = base
    copy = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__, copy.__doc__ = fn.__kwdefaults__, fn.__doc__
    return copy


def _selection(indices, kv, topk_length):
    valid = valid_slot_mask(indices, kv.shape[0], topk_length)
    return valid, torch.where(valid, indices, -1)


def heads_scaled(base: KernelFn, heads: tuple[int, ...] = (2, 5), factor: float = 1.5) -> KernelFn:
    def kernel(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
        out = base(q, kv, indices, sm_scale, d_v, topk_length=topk_length)
        hit = [h for h in heads if h < q.shape[1]]
        if hit:
            out = out.clone()
            out[:, hit] = base(q[:, hit].contiguous(), kv, indices, sm_scale * factor, d_v, topk_length=topk_length)
        return out
    return kernel


def every_nth_token(base: KernelFn, period: int = 4, residue: int = 3) -> KernelFn:
    def kernel(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
        valid, wrong = _selection(indices, kv, topk_length)
        slots = torch.arange(valid.shape[1], device=valid.device)
        last = torch.where(valid, slots, -1).amax(dim=1)
        tokens = torch.arange(residue, max(indices.shape[0], residue), period, device=indices.device)
        tokens = tokens[last[tokens] > 0]
        wrong[tokens, last[tokens]] = -1
        return base(q, kv, wrong, sm_scale, d_v)
    return kernel


def onset_scaled(base: KernelFn, start: int, factor: float = 1.1) -> KernelFn:
    def kernel(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
        out = base(q, kv, indices, sm_scale, d_v, topk_length=topk_length)
        if start < q.shape[0]:
            out = out.clone()
            late = topk_length[start:] if topk_length is not None else None
            out[start:] = base(q[start:], kv, indices[start:], sm_scale * factor, d_v, topk_length=late)
        return out
    return kernel


def rows_wrapped(base: KernelFn, bound: int) -> KernelFn:
    def kernel(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
        valid, wrong = _selection(indices, kv, topk_length)
        wrong = torch.where(valid & (wrong >= bound), wrong - bound, wrong)
        return base(q, kv, wrong, sm_scale, d_v)
    return kernel


def window_dropped(base: KernelFn, window: int) -> KernelFn:
    def kernel(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
        valid, wrong = _selection(indices, kv, topk_length)
        behind = torch.arange(indices.shape[0], device=indices.device)[:, None] - wrong
        return base(q, kv, torch.where(valid & (behind >= window), -1, wrong), sm_scale, d_v)
    return kernel


def dims_scaled(base: KernelFn, start: int, stop: int, factor: float = 0.95) -> KernelFn:
    def kernel(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
        out = base(q, kv, indices, sm_scale, d_v, topk_length=topk_length).clone()
        out[..., start:stop] = (out[..., start:stop].float() * factor).to(out.dtype)
        return out
    return kernel


def temperature(base: KernelFn, factor: float = 0.997) -> KernelFn:
    def kernel(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
        return base(q, kv, indices, sm_scale * factor, d_v, topk_length=topk_length)
    return kernel


def full_first_dropped(base: KernelFn) -> KernelFn:
    def kernel(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
        valid, wrong = _selection(indices, kv, topk_length)
        full = valid.all(dim=1)
        wrong[full, 0] = -1
        return base(q, kv, wrong, sm_scale, d_v)
    return kernel


def structured_faults(base: KernelFn, tokens: int, d_v: int) -> dict[str, tuple[KernelFn, str]]:
    """The kinds above on `base`, sized for a prompt of `tokens` tokens and a latent of `d_v` dims: name ->
    (kernel, description)."""
    start, bound = 5 * tokens // 8, 1 << max(1, (tokens - 1).bit_length() - 1)
    window, block = max(2, tokens // 4), max(1, d_v // 4)
    return {
        "fault:heads_2_5_scaled": (heads_scaled(base), "heads 2 and 5 at softmax scale x 1.5"),
        "fault:t3mod4_last_dropped": (every_nth_token(base), "tokens t = 3 mod 4 drop their last valid slot"),
        f"fault:scaled_from{start}": (onset_scaled(base, start), f"tokens from {start} on at softmax scale x 1.1"),
        f"fault:rows_wrap{bound}": (rows_wrapped(base, bound), f"rows r >= {bound} read as row r - {bound}"),
        f"fault:window{window}": (window_dropped(base, window), f"rows {window} or more positions behind dropped"),
        f"fault:dims{block}-{2 * block}": (dims_scaled(base, block, 2 * block),
                                          f"output dims {block}..{2 * block - 1} x 0.95"),
        "fault:temperature_x0.997": (temperature(base), "softmax scale x 0.997"),
        "fault:full_first_dropped": (full_first_dropped(base), "tokens with every slot valid drop their first"),
    }
