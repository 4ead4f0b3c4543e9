"""The options every in-process model check takes (the CLI's shared flags, by the same names), as one
value a library caller builds directly: `CheckOptions(model="ref-gpu", backends=["mykernel"], tp=8)`.

Light module (no torch, transformers or triton): the CLI builds it before any heavy import.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields

from glmcheck.checks.band import check_gate_ratio
from glmcheck.evaluate.arguments import check_experts, check_layers, check_number, check_seed
from glmcheck.model.engine_shape import check_engine_options
from glmcheck.model.trained import DEFAULT_MODEL

EXACT = {"fp32": "reference", "fp64": "reference:fp64"}  # --exact -> the exact reference's backend name
# The checks' prompt lengths on a GPU when none is given (the precompile child predicts the same ones)
GPU_TOKENS = 4096  # layer0, drift (128 on the CPU)
GPU_LOGITS_LENGTHS = (2048, 4096, 8192)  # logits (64, 128 on the CPU)
GPU_SWEEP_RANGE = (1024, 32768)  # the sweep's grid (32..256 on the CPU)


@dataclass
class CheckOptions:
    """Which model, which backends, which reference and gate (docs/checks.md, "Options": each field is the
    flag of the same name). `backends` None is every backend available here; `baseline` None is the
    default baseline (FlashMLA where it runs), "none" no baseline; `kv_cache_dtype` None or "bf16" is
    the bf16 KV cache, "fp8_e4m3" an emulated FP8 one."""

    model: str = DEFAULT_MODEL
    checkpoint: str | None = None
    layers: int | None = None
    experts: int | None = None
    seed: int = 0
    init: str = "sharp"
    device: str | None = None
    tp: int = 1
    backends: list[str] | str | None = None
    exact: str = "fp32"
    baseline: str | None = None
    band: int | None = None  # None: the check's default (DEFAULT_BAND; the sweep SWEEP_BAND)
    kv_cache_dtype: str | None = None
    deterministic: bool = False
    gate_ratio: float = 2.0
    max_rel_l2: float | None = None
    dense_threshold: int | None = None
    quiet: bool = False
    calls: str = "prefill"  # "serving": engine-shaped calls (`glmcheck.model.engine_shape`), shaped by the three below
    chunk: int | None = None
    pool_rows: int | None = None
    requests: int | None = None

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> CheckOptions:
        """The options a parsed command line holds (fields it lacks keep their defaults)."""
        return cls(**{f.name: getattr(ns, f.name) for f in fields(cls) if hasattr(ns, f.name)})

    def backend_list(self) -> list[str] | None:
        """`backends` as a list of names (a comma-separated string is split), None for the default set."""
        if self.backends is None:
            return None
        names = self.backends.split(",") if isinstance(self.backends, str) else list(self.backends)
        return [b.strip() for b in names if b.strip()]

    def check(self) -> None:
        """What needs no model (ValueError naming the flag): seed, cap, depth, experts, a --backends that names
        nothing, the gate ratio and the engine-shaped calls' options."""
        check_seed(self.seed)
        check_number(self.max_rel_l2, "--max-rel-l2", positive=True)
        if not self.checkpoint:  # with one, config_of refuses any --layers / --experts but its own
            check_layers(self.layers)
            check_experts(self.experts)
        if self.backends is not None and not self.backend_list():
            raise ValueError(f"--backends names no backend: {self.backends!r}")
        check_gate_ratio(self.gate_ratio)
        check_engine_options(self.calls, self.chunk, self.pool_rows, self.requests)
