"""Which form of two of glmcheck's own backends runs: the noise band's ideal kernels (`band_kernels`: "torch", the
block loop, or "triton", `band_triton`'s one pass per token; "auto" takes triton on a CUDA device, torch elsewhere)
and the fp32 exact reference (`reference`: "torch", or "triton", `reference_triton` on the tensor cores). The forms
differ in the order of fp32 sums only, yet the band's form moves the scale bias it holds (docs/reliability.md), so a
check records the forms it ran (`CheckOptions.band_impl` / `reference_impl`, part of a resumable run's fingerprint).

`active()` is the forms in use: those a check set for its run (`using`, process-wide, so that compile ahead's threads
see them too), else the environment's (GLMCHECK_BAND_IMPL, GLMCHECK_REFERENCE_IMPL), else auto and torch. Light module
(no torch): the options read their defaults here before any heavy import.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass

BAND_ENV = "GLMCHECK_BAND_IMPL"
REFERENCE_ENV = "GLMCHECK_REFERENCE_IMPL"
BAND_IMPLS = ("auto", "torch", "triton")
REFERENCE_IMPLS = ("torch", "triton")


@dataclass(frozen=True)
class Forms:
    """The band's form (BAND_IMPLS) and the fp32 reference's (REFERENCE_IMPLS)."""

    band: str = "auto"
    reference: str = "torch"

    def band_on(self, device_type: str) -> str:
        """The band's form on a device of `device_type` ("cuda", "cpu"): auto resolved."""
        if self.band == "auto":
            return "triton" if device_type == "cuda" else "torch"
        return self.band

    def record(self, device_type: str) -> dict[str, str]:
        """What a record's options say of the forms on a device of `device_type`: band_impl (auto resolved) and
        reference_impl."""
        return {"band_impl": self.band_on(device_type), "reference_impl": self.reference}


def band_default() -> str:
    """GLMCHECK_BAND_IMPL (auto when unset); ValueError naming the variable for a value that is no form."""
    return _from_environment(BAND_ENV, BAND_IMPLS, "auto, torch or triton")


def reference_default() -> str:
    """GLMCHECK_REFERENCE_IMPL (torch when unset); ValueError naming the variable for a value that is no form."""
    return _from_environment(REFERENCE_ENV, REFERENCE_IMPLS, "torch or triton")


def _from_environment(name: str, choices: tuple[str, ...], said: str) -> str:
    choice = os.environ.get(name, "").strip().lower() or choices[0]
    if choice not in choices:
        raise ValueError(f"{name} must be {said}, got {choice!r}")
    return choice


_in_use: list[Forms] = []  # the forms `using` set, innermost last


def active() -> Forms:
    """The forms in use (module docstring)."""
    return _in_use[-1] if _in_use else Forms(band_default(), reference_default())


@contextlib.contextmanager
def using(forms: Forms) -> Iterator[Forms]:
    """Within: `active()` is `forms`, in every thread of the process (a check's run: its forwards, compile ahead's
    threads, its diagnosis)."""
    _in_use.append(forms)
    try:
        yield forms
    finally:
        _in_use.remove(forms)
