"""glmcheck: accuracy validation of the DSA sparse-MLA prefill kernel in GLM-5.x models."""

from glmcheck.process.triton_mode import choose_at_import

__version__ = "0.1.0"

# Triton's mode must be chosen before anything imports Triton: on a machine without a GPU, its CPU interpreter.
choose_at_import()
