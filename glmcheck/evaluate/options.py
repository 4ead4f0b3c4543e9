"""The options every in-process model check takes (the CLI's shared flags, by the same names), as one
value a library caller builds directly: `CheckOptions(model="ref-gpu", backends=["mykernel"], tp=8)`.

Light module (no torch, transformers or triton): the CLI builds it before any heavy import.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, fields

from glmcheck.backends.forms import BAND_IMPLS, REFERENCE_IMPLS, Forms, band_default, reference_default
from glmcheck.backends.names import EXACT
from glmcheck.checks.band import check_gate_ratio
from glmcheck.evaluate.arguments import check_band, check_count, check_experts, check_layers, check_number, check_seed
from glmcheck.model.engine_shape import check_engine_options
from glmcheck.model.trained import DEFAULT_MODEL
from glmcheck.process.wording import flag

WEIGHTS = ("auto", "bf16", "fp8")  # --weights
# The checks' prompt lengths on a GPU when none is given (the precompile child predicts the same ones)
GPU_TOKENS = 4096  # layer0, drift (128 on the CPU)
GPU_LOGITS_LENGTHS = (2048, 4096, 8192)  # logits (64, 128 on the CPU)
GPU_SWEEP_RANGE = (1024, 32768)  # the sweep's grid (32..256 on the CPU)


@dataclass
class CheckOptions:
    """Which model, which backends, which reference and gate (docs/checks.md, "Options": each field is the
    flag of the same name). `backends` None is every backend available here; `baseline` None is the
    default baseline (FlashMLA where it runs), "none" no baseline; `kv_cache_dtype` None or "bf16" is
    the bf16 KV cache, "fp8_e4m3" an emulated FP8 one; `band_impl` / `reference_impl` None are the environment's
    forms (GLMCHECK_BAND_IMPL, GLMCHECK_REFERENCE_IMPL), filled in on construction."""

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
    weights: str = "auto"  # WEIGHTS: bf16, fp8 (block-FP8 resident) or auto (docs/models.md, "FP8 weights resident")
    rehearse_rank: int | None = None  # one rank of --tp built alone, its all-reduces the identity: no verdict
    calls: str = "prefill"  # "serving": engine-shaped calls (`glmcheck.model.engine_shape`), shaped by the three below
    chunk: int | None = None
    pool_rows: int | None = None
    requests: int | None = None
    band_impl: str | None = None  # the band's form (`glmcheck.backends.forms`): None takes GLMCHECK_BAND_IMPL, or auto
    reference_impl: str | None = None  # the fp32 reference's form: None takes GLMCHECK_REFERENCE_IMPL, or torch

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> CheckOptions:
        """The options a parsed command line holds (fields it lacks keep their defaults)."""
        return cls(**{f.name: getattr(ns, f.name) for f in fields(cls) if hasattr(ns, f.name)})

    def __post_init__(self):
        if self.band_impl is None:  # the environment's form (ValueError naming the variable for one that is none)
            self.band_impl = band_default()
        if self.reference_impl is None:
            self.reference_impl = reference_default()
        self.check()

    def forms(self) -> Forms:
        """The band's and the fp32 reference's forms a check on these options runs (`glmcheck.backends.forms`)."""
        return Forms(self.band_impl, self.reference_impl)

    def backend_list(self) -> list[str] | None:
        """`backends` as a list of names (a comma-separated string is split), None for the default set."""
        if self.backends is None:
            return None
        names = self.backends.split(",") if isinstance(self.backends, str) else list(self.backends)
        return [b.strip() for b in names if isinstance(b, str) and b.strip()]

    def check(self) -> None:
        """Every field a value it can take, checked on construction, before any model is built: ValueError naming
        the field (the flag of that name when the command line builds it: `glmcheck.process.wording`). What needs
        the model (--tp dividing its heads, backends that run here, --weights fp8 on a bf16 checkpoint) is checked by
        the check's `Setup`."""
        from glmcheck.model.names import model_names

        if not (isinstance(self.checkpoint, str) and self.checkpoint.strip()) and self.checkpoint is not None:
            raise ValueError(f"{flag('checkpoint')} must name a checkpoint directory, got {self.checkpoint!r}")
        if not self.checkpoint and self.model not in model_names():
            raise ValueError(f"{flag('model')} must be one of {', '.join(model_names())}, got {self.model!r}")
        check_seed(self.seed)
        if not self.checkpoint:  # with one, config_of refuses any --layers / --experts but its own
            check_layers(self.layers)
            check_experts(self.experts)
        _check_choice(self.init, "init", INITS)
        _check_choice(self.exact, "exact", tuple(EXACT))
        _check_choice(self.kv_cache_dtype, "kv_cache_dtype", KV_CACHE_DTYPES)
        if self.device is not None and not (isinstance(self.device, str) and DEVICE_NAME.fullmatch(self.device)):
            raise ValueError(f"{flag('device')} must be cpu, cuda or cuda:N, got {self.device!r}")
        check_count(self.tp, flag("tp"))
        self._check_backends()
        if self.baseline is not None and not (isinstance(self.baseline, str) and self.baseline.strip()):
            raise ValueError(f"{flag('baseline')} must name a backend (or 'none'), got {self.baseline!r}")
        if self.band is not None:
            check_band(self.band)
        check_gate_ratio(self.gate_ratio, flag("gate_ratio"))
        check_number(self.max_rel_l2, flag("max_rel_l2"), positive=True)
        check_count(self.dense_threshold, flag("dense_threshold"), minimum=0)
        for name in ("deterministic", "quiet"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{flag(name)} must be True or False, got {getattr(self, name)!r}")
        _check_choice(self.weights, "weights", WEIGHTS)
        _check_choice(self.band_impl, "band_impl", BAND_IMPLS)
        _check_choice(self.reference_impl, "reference_impl", REFERENCE_IMPLS)
        check_engine_options(self.calls, self.chunk, self.pool_rows, self.requests)
        if self.rehearse_rank is not None:
            check_count(self.rehearse_rank, flag("rehearse_rank"), minimum=0)
            if isinstance(self.tp, int) and not isinstance(self.tp, bool) and self.rehearse_rank >= self.tp:
                raise ValueError(f"{flag('rehearse_rank')} must name a rank of {flag('tp')} {self.tp} (0 to "
                                 f"{self.tp - 1}), got {self.rehearse_rank}")

    def _check_backends(self) -> None:
        if self.backends is None:
            return
        if not isinstance(self.backends, (str, list, tuple)) or \
                not all(isinstance(b, str) for b in ([self.backends] if isinstance(self.backends, str) else
                                                     self.backends)):
            raise ValueError(f"{flag('backends')} must be backend names (a list, or one comma-separated string), "
                             f"got {self.backends!r}")
        names = self.backend_list()
        if not names:
            raise ValueError(f"{flag('backends')} names no backend: {self.backends!r}")
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"{flag('backends')} names {', '.join(twice)} twice; each backend is one row")


INITS = ("hf", "sharp")  # the dummy weights' scales (glmcheck.model.weights.INIT_SCALES)
KV_CACHE_DTYPES = (None, "bf16", "fp8_e4m3")  # glmcheck.model.swap.KV_CACHE_DTYPES
DEVICE_NAME = re.compile(r"cpu|cuda(:\d+)?")


def _check_choice(value: object, name: str, choices: tuple) -> None:
    if value not in choices:
        shown = ", ".join("None" if c is None else c for c in choices)
        raise ValueError(f"{flag(name)} must be one of {shown}, got {value!r}")
