"""Where this process's Triton kernels run: on a GPU, or on the CPU through Triton's interpreter.

Triton reads TRITON_INTERPRET when a function is decorated with `@triton.jit`, and Triton's own library
functions (`tl.sum`'s combine step, `tl.cdiv`, ...) are decorated when `triton` is first imported. So the
choice must be made before anything imports Triton, and much does: transformers' model code imports
`torch._dynamo`, which imports Triton. glmcheck therefore chooses in two steps:

- `choose_at_import()` runs when `glmcheck` itself is imported, without importing torch (the command line
  stays light): a Linux machine without an NVIDIA, ROCm or WSL GPU device node, a Mac, or a process whose
  CUDA_VISIBLE_DEVICES hides every GPU has no GPU that Triton could use, so TRITON_INTERPRET=1 is set there.
- `confirm_with_torch()` runs when `glmcheck.kernels` is imported: torch decides (`torch.cuda.is_available()`)
  for the machines the first step left open, and takes back a choice of the first step that torch
  contradicts while Triton is not yet imported.

A TRITON_INTERPRET the user set is never changed. `late_import_problem()` says when the choice came after
Triton was imported (by the caller's code before glmcheck), which the interpreter cannot run.
"""

from __future__ import annotations

import glob
import os
import sys

VARIABLE = "TRITON_INTERPRET"
# Device nodes of a GPU that torch.cuda can use: NVIDIA (nvidiactl, nvidia0...), ROCm (kfd), WSL2 (dxg).
GPU_DEVICE_PATTERNS = ("/dev/nvidiactl", "/dev/nvidia[0-9]*", "/dev/kfd", "/dev/dxg")

_state = {"set_by": None, "triton_was_imported": False}  # "import" or "torch" when glmcheck set the variable


def certainly_no_gpu() -> bool:
    """True when this process has no GPU that Triton could use, judged without importing torch: macOS, every GPU
    hidden (CUDA_VISIBLE_DEVICES empty or -1), or Linux without any GPU device node. False means "maybe": torch
    decides later."""
    if sys.platform == "darwin" or os.environ.get("CUDA_VISIBLE_DEVICES", "0").strip() in ("", "-1"):
        return True
    if not sys.platform.startswith("linux"):
        return False
    return not any(glob.glob(pattern) for pattern in GPU_DEVICE_PATTERNS)


def _set_interpreter(by: str) -> None:
    os.environ[VARIABLE] = "1"
    _state["set_by"] = by
    _state["triton_was_imported"] = "triton" in sys.modules


def choose_at_import() -> None:
    """At `import glmcheck`: set TRITON_INTERPRET=1 where there is certainly no GPU and the user has not chosen."""
    if VARIABLE not in os.environ and certainly_no_gpu():
        _set_interpreter("import")


def confirm_with_torch() -> None:
    """At `import glmcheck.kernels`: without CUDA (torch's answer) set TRITON_INTERPRET=1 unless the user chose;
    with CUDA, take back the interpreter that `choose_at_import` set while Triton is not imported yet."""
    import torch

    has_cuda = torch.cuda.is_available()
    if VARIABLE not in os.environ and not has_cuda:
        _set_interpreter("torch")
    elif has_cuda and _state["set_by"] == "import" and "triton" not in sys.modules:
        del os.environ[VARIABLE]
        _state["set_by"] = None


def late_import_problem() -> str | None:
    """A one-line explanation when glmcheck turned the interpreter on after Triton had been imported (its library
    functions were then built for a GPU this machine lacks, so interpreted kernels cannot call them); else None."""
    if _state["set_by"] is None or not _state["triton_was_imported"]:
        return None
    return (f"Triton was imported before glmcheck on a machine without CUDA, so its kernels cannot run in Triton's "
            f"CPU interpreter: set {VARIABLE}=1 before starting Python, or import glmcheck before anything that "
            f"imports triton (transformers' models, torch.compile)")
