"""Backend names that need no kernel: the band's variants `band:K`, the exact references `--exact` picks. Light module
(no torch): an option's check, the command line and the precompile child's spec name backends through it."""

from __future__ import annotations

BAND_PREFIX = "band:"
# The ideal kernels a band draws its variants from (`glmcheck.backends.band_kernels.BAND_FAMILY`: every block size x
# order x normaliser once); named here, in a module without torch, so an option's check needs no kernel import.
BAND_FAMILY_SIZE = 16
EXACT = {"fp32": "reference", "fp64": "reference:fp64"}  # --exact -> the exact reference's backend name


def is_band_name(name: str) -> bool:
    """True for `band:K` (K a non-negative int): variant K of the checks' noise band."""
    return name.startswith(BAND_PREFIX) and name[len(BAND_PREFIX):].isdigit()


def band_names(size: int) -> list[str]:
    """The backends of a band of `size` legitimate variants."""
    return [f"{BAND_PREFIX}{k}" for k in range(size)]
