"""Where the Triton kernels run: a CUDA GPU, or the CPU through Triton's interpreter.

Triton decides at decoration time (when a kernel module is imported) whether `@triton.jit`
functions are interpreted, from the environment variable TRITON_INTERPRET. On a machine
without CUDA we set it before any kernel module is imported, so the same kernels run on CPU
tensors (slowly: small shapes only).
"""

from __future__ import annotations

import os

import torch


def ensure_interpreter_without_cuda() -> None:
    """Set TRITON_INTERPRET=1 when no CUDA device exists and the user has not chosen."""
    if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"


def interpreter_active() -> bool:
    """True when Triton kernels run in the CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


# The attention kernels map program p to token (or union group) N-1-p, so the longest prefill
# rows start first and the short ones fill the last wave. Outputs are identical either way.
# H200 run 11 (scripts/order_probe.py, graph replays): 64-row union tiles 1.03-1.14x faster,
# per-token 1.01-1.12x; False restores token order (A/B).
schedule = {"longest_first": True}
