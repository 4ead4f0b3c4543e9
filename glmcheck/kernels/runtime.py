"""Where the Triton kernels run: a CUDA GPU, or the CPU through Triton's interpreter, which Triton chooses when
a kernel module is imported (TRITON_INTERPRET); without CUDA we set it first."""

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

