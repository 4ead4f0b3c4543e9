"""Shared fixtures: the device tests run on (CUDA when present, else the Triton interpreter)."""

from __future__ import annotations

import pytest
import torch

import glmcheck.kernels  # noqa: F401  (turns on the interpreter on machines without CUDA)
from glmcheck.kernels import tiles

GPU = torch.cuda.is_available()


@pytest.fixture
def device() -> torch.device:
    return torch.device("cuda" if GPU else "cpu")


@pytest.fixture(autouse=True)
def _fresh_tile_memo():
    tiles.clear_fitted_tiles()
    yield
    tiles.clear_fitted_tiles()


def pytest_collection_modifyitems(config, items):
    if GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the GPU machine with -m gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
