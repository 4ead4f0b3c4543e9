"""Triton and Gluon sparse-MLA prefill kernels and their launchers (device code and launchers live in separate
files: `prefill`, `union` and `gluon.launch` launch the kernels of the other files). Importing this package on a
machine without CUDA turns on Triton's CPU interpreter (TRITON_INTERPRET=1) unless the variable is already set
(`glmcheck.process.triton_mode`: `import glmcheck` already did so where there is certainly no GPU)."""

from glmcheck.kernels.runtime import confirm_with_torch

confirm_with_torch()

from glmcheck.kernels.plan import SparseMLAPlan, plan_sparse_mla  # noqa: E402
from glmcheck.kernels.prefill import sparse_mla_prefill  # noqa: E402
from glmcheck.kernels.union import UnionSets, legal_groups, union_dedup, union_is_legal  # noqa: E402

__all__ = ["SparseMLAPlan", "UnionSets", "legal_groups", "plan_sparse_mla", "sparse_mla_prefill", "union_dedup",
           "union_is_legal"]
