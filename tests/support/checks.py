"""Assertions shared by the kernel tests."""

from __future__ import annotations

import torch

from glmcheck.checks import metrics

REL_L2_GATE = 3e-3
COSINE_GATE = 0.99999


def assert_close_to_reference(out: torch.Tensor, ref: torch.Tensor) -> None:
    """Every element written and finite; rel-L2 and cosine against the fp64 reference in gate."""
    assert torch.isfinite(out).all(), "output has NaN/Inf (unwritten elements of a poisoned buffer?)"
    rel, cos = metrics.rel_l2(out, ref), metrics.cosine(out, ref)
    assert rel <= REL_L2_GATE, f"rel-L2 {rel:.3e} > {REL_L2_GATE:.0e}"
    assert cos >= COSINE_GATE, f"cosine {cos:.10f} < {COSINE_GATE}"
