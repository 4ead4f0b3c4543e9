"""`KernelCall`: one attention-backend call's arguments, kept to run other backends on the same inputs.

Made by the attention swap (`glmcheck.model.swap`, with `record_calls`) or predicted from a check's options
(`glmcheck.checks.precompile`); run by `glmcheck.checks.compile_ahead`. Without transformers, so that the
precompile child imports only torch, Triton and the backends.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


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
