"""Attention backends by name: plain functions with one signature, and their call counters.

Every kernel-level backend takes the kernel's arguments
    fn(q [T, H, d_qk] bf16, kv [S, d_qk] bf16, indices [T, topk] int32, sm_scale, d_v, *,
       topk_length=None) -> out [T, H, d_v]
and all of them see the same indices. `get_backend(name)` returns a fresh `Backend` whose
`calls` counter counts invocations, so a check can fail a backend that was never called.

A backend may also have a planner, `planner(indices, *, num_kv_rows, num_heads, topk_length=None)`
-> plan, whose plan its fn accepts as `plan=` for every call with those indices (the kernel under
test: `glmcheck.kernels.plan_sparse_mla`). The harness then builds one plan per indexer selection
and reuses it (`Backend.plan_builds` counts the builds).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from glmcheck.backends.band_kernels import fp8_band_variant
from glmcheck.backends.flashmla import FlashMLAUnavailable, find_flashmla, flashmla_sparse_prefill
from glmcheck.backends.flashmla_kv import flashmla_kv_prefill
from glmcheck.backends.names import BAND_PREFIX, is_band_name
from glmcheck.backends.reference import band_variant, sparse_mla_reference
from glmcheck.backends.torch_gather import torch_bf16_sparse_prefill
from glmcheck.kernels import plan_sparse_mla, sparse_mla_prefill


@dataclass
class Backend:
    """A named attention backend with an invocation counter."""

    name: str
    fn: Callable[..., torch.Tensor]
    description: str
    calls: int = field(default=0)
    planner: Callable[..., object] | None = None
    plan_builds: int = field(default=0)
    fp32_output: bool = False  # its output is fp32 or fp64 (an exact reference); every other backend's bf16
    built_in: bool = True  # glmcheck's own; a plug-in's exceptions are its FAIL (`KernelFault`), not glmcheck's

    def __call__(self, q, kv, indices, sm_scale, d_v=512, *, topk_length=None, plan=None) -> torch.Tensor:
        self.calls += 1
        if plan is None:
            return self.fn(q, kv, indices, sm_scale, d_v, topk_length=topk_length)
        return self.fn(q, kv, indices, sm_scale, d_v, topk_length=topk_length, plan=plan)

    def plan(self, indices: torch.Tensor, num_kv_rows: int, num_heads: int,
             topk_length: torch.Tensor | None = None) -> object | None:
        """The planner's plan for calls on `indices` (None for a backend without a planner)."""
        if self.planner is None:
            return None
        self.plan_builds += 1
        return self.planner(indices, num_kv_rows=num_kv_rows, num_heads=num_heads, topk_length=topk_length)


def _triton(union: int) -> Callable[..., torch.Tensor]:
    return functools.partial(sparse_mla_prefill, union=union)


_PLANNERS: dict[str, Callable[..., object]] = {
    name: functools.partial(plan_sparse_mla, union=union)
    for name, union in (("triton_sparse_mla", 0), ("triton_sparse_mla:union2", 2),
                        ("triton_sparse_mla:union4", 4), ("triton_sparse_mla:union8", 8))}


def reference_bf16_out(q, kv, indices, sm_scale, d_v=512, *, topk_length=None) -> torch.Tensor:
    """The fp32 reference with its output rounded to bf16: an ideal bf16-output kernel."""
    return sparse_mla_reference(q, kv, indices, sm_scale, d_v, topk_length=topk_length,
                                dtype=torch.float32).to(torch.bfloat16)


_REGISTRY: dict[str, tuple[Callable[..., torch.Tensor], str]] = {
    "reference": (functools.partial(sparse_mla_reference, dtype=torch.float32),
                  "fp32 torch gather-softmax per token"),
    "reference:fp64": (sparse_mla_reference, "fp64 torch gather-softmax per token"),
    "reference:bf16": (reference_bf16_out, ("fp32 reference, output rounded to bf16 (the ideal bf16 kernel; "
                                            "the checks' noise floor)")),
    "triton_sparse_mla": (_triton(0), "the kernel under test, per-token path"),
    "triton_sparse_mla:union2": (_triton(2), "the kernel under test, union of 2 adjacent tokens"),
    "triton_sparse_mla:union4": (_triton(4), "the kernel under test, union of 4 adjacent tokens"),
    "triton_sparse_mla:union8": (_triton(8), "the kernel under test, union of 8 adjacent tokens"),
    "torch_bf16": (torch_bf16_sparse_prefill, "plain PyTorch gather + bmm in bf16"),
    "flashmla_sparse": (flashmla_sparse_prefill, "FlashMLA sparse prefill, heads zero-padded to 64 (SM90)"),
    "flashmla_kv": (flashmla_kv_prefill, ("FlashMLA's FP8 sparse decode kernel at prefill on the FP8 pool, every "
                                          "token a batch entry, heads padded to 64 / 128 (SM90; FP8 KV only)")),
}


_SOURCES: dict[str, str] = {}  # where each backend came from, for `glmcheck backends`
_FP32_OUTPUT: set[str] = {"reference", "reference:fp64"}  # backends whose output is fp32 / fp64, not bf16


def register_backend(name: str, fn: Callable[..., torch.Tensor], description: str = "",
                     source: str = "register_backend", planner: Callable[..., object] | None = None, *,
                     fp32_output: bool = False) -> None:
    """Make `fn` (the kernel signature above) available under `name` to the checks and the CLI.

    Names must be new (ValueError otherwise); use this to put your own kernel under test, or an
    entry point / `--backends name=module:function` (`glmcheck.backends.plugins`). `planner` (see
    the module docstring) lets the harness build one plan per indexer selection for `fn`. `fp32_output` marks
    a backend whose output is fp32 or fp64 (an exact reference, or a test double built on one); every other
    backend must return bf16, as the kernel contract says.
    """
    if not isinstance(name, str) or not name or name in _REGISTRY or name.startswith(("hf_", BAND_PREFIX)) \
            or "=" in name:
        raise ValueError(f"backend name must be a new non-empty string (not hf_*), got {name!r}")
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    if planner is not None and not callable(planner):
        raise TypeError(f"planner must be callable or None, got {type(planner).__name__}")
    _REGISTRY[name] = (fn, description)
    _SOURCES[name] = source
    if planner is not None:
        _PLANNERS[name] = planner
    if fp32_output:
        _FP32_OUTPUT.add(name)


def resolve_backend(spec: str) -> str:
    """The backend name `spec` stands for, registering it first when it comes from outside:
    a registered name as it is; `name=module:function` (or `name=file.py:function`) loaded and
    registered under `name`; an installed package's entry point loaded under its name. BackendError
    (one line naming the backend and the module) for a spec that names nothing that loads."""
    from glmcheck.backends import plugins

    if spec in _REGISTRY:
        return spec
    if is_band_name(spec):
        _REGISTRY[spec] = (band_variant(int(spec[len(BAND_PREFIX):])), ("a legitimate variant of the noise band "
                            "(glmcheck.backends.reference.band_variant)"))
        return spec
    if "=" in spec:
        name, target = plugins.parse_spec(spec)
        if name in _REGISTRY and _SOURCES.get(name) == f"--backends {target}":
            return name
        if name in _REGISTRY or name.startswith("hf_"):
            raise plugins.BackendError(f"backend name {name!r} is taken; choose another for {target}")
        register_backend(name, plugins.load_target(name, target), f"{target} (by name)", f"--backends {target}")
        return name
    points = plugins.entry_points()
    if spec in points:
        fn = plugins.load_entry_point(spec, points[spec])
        register_backend(spec, fn, f"{points[spec].value}", plugins.entry_point_source(points[spec]))
        return spec
    known = list(_REGISTRY) + [n for n in points if n not in _REGISTRY]
    raise plugins.BackendError(f"unknown backend {spec!r}; expected one of {', '.join(known)}, hf_eager, hf_sdpa, "
                               f"or NAME=MODULE:FUNCTION")


def backend_source(name: str) -> str:
    """Where a registered backend came from: "built in", an entry point, a name=module spec, ..."""
    if name in _BUILTIN or is_band_name(name):
        return "built in"
    if name in _SOURCES:
        return _SOURCES[name]
    from glmcheck.backends.plugins import entry_point_source, entry_points

    points = entry_points()
    return entry_point_source(points[name]) if name in points else "register_backend"


def backend_identity(name: str) -> dict[str, str]:
    """Where a backend's code lives, for resume fingerprints: built-in backends are covered by the
    glmcheck source digest; a registered or plugin backend gives its module and a hash of that
    module's source (so fixing its code invalidates results computed before)."""
    if name not in _REGISTRY:
        return {"source": "transformers" if name.startswith("hf_") else "unknown"}
    source = backend_source(name)
    if source == "built in":
        return {"source": source}
    fn = getattr(_REGISTRY[name][0], "func", _REGISTRY[name][0])
    module = inspect.getmodule(fn)
    try:  # a FILE:fn plug-in has no module: its file's source (a repr would hold the process's address)
        text = inspect.getsource(module) if module is not None else Path(inspect.getsourcefile(fn)).read_text()
    except (OSError, TypeError):
        text = getattr(fn, "__qualname__", type(fn).__name__)
    return {"source": source, "module": getattr(module, "__name__", "?"),
            "source_hash": hashlib.sha256(text.encode()).hexdigest()[:16]}


def unregister_backend(name: str) -> None:
    """Remove a backend added with register_backend (built-in names cannot be removed)."""
    if name in _BUILTIN or name not in _REGISTRY or is_band_name(name):
        raise ValueError(f"{name!r} is not a registered custom backend")
    del _REGISTRY[name]
    _SOURCES.pop(name, None)
    _PLANNERS.pop(name, None)
    _FP32_OUTPUT.discard(name)

_BUILTIN = frozenset(_REGISTRY)


def backend_names() -> list[str]:
    """All kernel-level backend names: registered ones, then installed packages' entry points."""
    from glmcheck.backends.plugins import entry_points

    return list(_REGISTRY) + [name for name in entry_points() if name not in _REGISTRY]


def get_backend(name: str, *, deterministic: bool = False, kv_cache_dtype: str | None = None) -> Backend:
    """A fresh Backend for `name`; ValueError naming the known backends otherwise.

    `deterministic` asks the Triton backends for batch-invariant results (union off); over an FP8 KV cache
    (`kv_cache_dtype` "fp8_e4m3") `band:K` is the band's FP8 variant K (`band_kernels.fp8_band_variant`). `name` may
    also be an installed entry point or `name=module:function` (`resolve_backend`).
    """
    name = resolve_backend(name)
    fn, description = _REGISTRY[name]
    if kv_cache_dtype == "fp8_e4m3" and is_band_name(name):
        fn = fp8_band_variant(int(name[len(BAND_PREFIX):]))
        description = fn.__doc__
    planner = _PLANNERS.get(name)
    if deterministic and name.startswith("triton_sparse_mla"):
        fn = functools.partial(fn, deterministic=True)
        planner = functools.partial(planner, deterministic=True)
    return Backend(name, fn, description, planner=planner, fp32_output=name in _FP32_OUTPUT,
                   built_in=backend_source(name) == "built in")


def flashmla_available() -> tuple[bool, str]:
    """(True, source) when FlashMLA loads, else (False, why)."""
    try:
        return True, find_flashmla().source
    except FlashMLAUnavailable as err:
        return False, str(err)
