"""Shared fixtures: the device tests run on (CUDA when present, else the Triton interpreter); the endpoint
transport's pauses."""

from __future__ import annotations

import os

import pytest
import torch

import glmcheck.kernels  # noqa: F401  (turns on the interpreter on machines without CUDA)
from glmcheck.kernels import tiles

GPU = torch.cuda.is_available()


def _share_cores_among_workers() -> None:
    """Under pytest-xdist each worker gets its share of the cores for torch's intra-op threads (and its children
    through OMP_NUM_THREADS): two workers of two threads each on CI's 2 cores spin against each other, 1.4x the
    wall time of one thread each (tests/test_tampered_records.py + test_hostile_inputs.py, 86 s against 63 s)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if workers > 1:
        threads = max(1, (os.cpu_count() or 1) // workers)
        torch.set_num_threads(threads)
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))


_share_cores_among_workers()


@pytest.fixture
def device() -> torch.device:
    return torch.device("cuda" if GPU else "cpu")


@pytest.fixture(autouse=True)
def _fresh_tile_memo():
    tiles.clear_fitted_tiles()
    yield
    tiles.clear_fitted_tiles()


@pytest.fixture
def pauses(monkeypatch) -> list[float]:
    """The endpoint transport's pauses between attempts, recorded instead of slept."""
    from glmcheck.sources import transport
    seen: list[float] = []
    monkeypatch.setattr(transport, "_pause", seen.append)
    return seen


def pytest_collection_modifyitems(config, items):
    gpus = torch.cuda.device_count() if GPU else 0
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (run on the GPU machine with -m gpu)")
    skip_multi = pytest.mark.skip(reason="needs 2+ CUDA GPUs (run on a multi-GPU machine with -m multigpu)")
    for item in items:
        if "gpu" in item.keywords and not gpus:
            item.add_marker(skip_gpu)
        if "multigpu" in item.keywords and gpus < 2:
            item.add_marker(skip_multi)
