"""glmcheck: accuracy validation of the DSA sparse-MLA prefill kernel in GLM-5.x models."""

__version__ = "0.1.0"
