"""`KernelCall`: one attention-backend call's arguments, kept to run other backends on the same inputs; and
`check_output`, the kernel contract its output keeps (the swap's one-shot calls and the engine-shaped ones alike).

Made by the attention swap (`glmcheck.model.swap`, with `record_calls`) or predicted from a check's options
(`glmcheck.startup.prediction`); run by `glmcheck.startup.compile_ahead`. Without transformers, so that the
precompile child imports only torch, Triton and the backends.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from glmcheck.backends.errors import KernelFault


@dataclass(frozen=True)
class KernelCall:
    """One backend call's arguments as the session made it (rank 0's slice under TP): q [T, H/tp, d_qk] bf16,
    kv [S, d_qk], indices [T, topk] int32, lengths [T] int32 or None, sm_scale, d_v."""

    q: torch.Tensor
    kv: torch.Tensor
    indices: torch.Tensor
    lengths: torch.Tensor | None
    sm_scale: float
    d_v: int

    def key(self) -> tuple:
        """What decides which kernel variants a call compiles, as far as shapes go."""
        return (tuple(self.q.shape), tuple(self.kv.shape), tuple(self.indices.shape), self.lengths is None,
                self.q.dtype, self.kv.dtype, self.d_v)


def check_output(name: str, out: object, q: torch.Tensor, d_v: int, fp32_output: bool) -> None:
    """KernelFault unless `out` keeps the kernel contract for `q` [T, H, d_qk]: a tensor [T, H, d_v] on q's device,
    bf16 (fp32 or fp64 for a backend of `fp32_output`: an exact reference)."""
    if not isinstance(out, torch.Tensor):
        raise KernelFault(name, f"returned a {type(out).__name__}, expected a tensor [T, H, d_v]")
    expected = [q.shape[0], q.shape[1], d_v]
    if list(out.shape) != expected:
        raise KernelFault(name, f"returned shape {list(out.shape)}, expected {expected} (the kernel contract)")
    dtypes = (torch.float32, torch.float64) if fp32_output else (torch.bfloat16,)
    if out.dtype not in dtypes:
        raise KernelFault(name, f"returned {str(out.dtype).removeprefix('torch.')}, expected "
                                f"{' or '.join(str(d).removeprefix('torch.') for d in dtypes)} (the kernel contract)")
    if out.device != q.device:
        raise KernelFault(name, f"returned a tensor on {out.device}, expected q's device {q.device}")
