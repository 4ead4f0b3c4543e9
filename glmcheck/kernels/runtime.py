"""Where the Triton kernels run: a CUDA GPU, or the CPU through Triton's interpreter (TRITON_INTERPRET), which
must be chosen before Triton is imported (`glmcheck.process.triton_mode` chooses it at `import glmcheck` and
confirms it with torch when this package is imported)."""

from __future__ import annotations

import os

from glmcheck.process.triton_mode import confirm_with_torch, late_import_problem

__all__ = ["confirm_with_torch", "interpreted_seconds", "interpreter_active", "require_kernel_device",
           "require_usable_interpreter"]

# Triton's interpreter on a 2-core CPU, fitted 2026-12 on selfcheck shapes (T = 16..128, H = 2..128, top-k 32..2048,
# d_qk 80..576, within 2x of the measured 2.5-170 s; it errs high at large shapes): a kernel call costs about
# INTERP_BLOCK_S + INTERP_ELEMENT_S x max(heads, 16) x d_qk per block of 16 selected rows of one token.
INTERP_BLOCK_S = 12e-3
INTERP_ELEMENT_S = 1e-6


def interpreted_seconds(blocks: int, heads: int, d_qk: int) -> float:
    """Estimated seconds of a kernel call in Triton's interpreter that reads `blocks` blocks of 16 selected rows
    (summed over its tokens) for `heads` heads of width `d_qk`."""
    return blocks * (INTERP_BLOCK_S + INTERP_ELEMENT_S * max(heads, 16) * d_qk)


def interpreter_active() -> bool:
    """True when Triton kernels run in the CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def require_usable_interpreter() -> None:
    """Before a kernel runs in the interpreter: RuntimeError (one line, saying what to do) when Triton was imported
    before the interpreter was turned on, instead of Triton's own error from inside the first kernel."""
    problem = late_import_problem() if interpreter_active() else None
    if problem:
        raise RuntimeError(problem)


def require_kernel_device(tensor: object, name: str) -> None:
    """ValueError naming `name` unless the tensor is where Triton runs: CUDA without the interpreter, the CPU with
    it; then `require_usable_interpreter`."""
    device = tensor.device
    if device.type == "cuda" and interpreter_active():
        raise ValueError(f"{name} is on CUDA but TRITON_INTERPRET=1 is set: unset it to run on the GPU")
    if device.type != "cuda" and not interpreter_active():
        raise ValueError(f"{name} must be on a CUDA device (or set TRITON_INTERPRET=1 to run CPU tensors through "
                         f"Triton's interpreter), got {device}")
    require_usable_interpreter()
