"""Where the Triton kernels run: a CUDA GPU, or the CPU through Triton's interpreter (TRITON_INTERPRET), which
must be chosen before Triton is imported (`glmcheck.process.triton_mode` chooses it at `import glmcheck` and
confirms it with torch when this package is imported)."""

from __future__ import annotations

import os

from glmcheck.process.triton_mode import confirm_with_torch, late_import_problem

__all__ = ["confirm_with_torch", "interpreter_active", "require_kernel_device", "require_usable_interpreter"]


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
