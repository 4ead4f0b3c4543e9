"""One library call per check, as lm-evaluation-harness's `simple_evaluate` is one call: each takes a
model (`CheckOptions`) or endpoints plus the check's own options and returns a `Report` (rows,
verdict, facts) that the CLI prints and writes; notebooks and tests call the same functions.

    from glmcheck.evaluate import CheckOptions, layer0
    report = layer0(CheckOptions(model="ref-cpu"), tokens=128)

Names are imported on first use, so `import glmcheck.evaluate` stays light.
"""

from __future__ import annotations

import importlib

# Exported name -> the module of this package that defines it. No module bears the name of a function it exports: an
# imported submodule is an attribute of the package, which would shadow the lazy name (`from glmcheck.evaluate import
# X` would give the module once anything had imported it); tests/test_layering.py holds both rules.
_WHERE = {"CheckOptions": "options", "Report": "report", "Setup": "setup", "layer0": "model_checks",
          "logits": "model_checks", "firsttoken": "model_checks", "drift": "model_checks", "sweep": "length_sweep",
          "firsttoken_endpoints": "endpoint_checks",
          "sweep_endpoints": "endpoint_sweep", "logits_endpoints": "endpoint_sweep",
          "tasks": "task_checks", "tasks_compare": "task_checks", "union_stats": "index_unions",
          "selftest_suite": "selftest_kernels", "verdict_rates": "selftest_rates", "power_curves": "selftest_rates",
          "bench_kernels": "kernel_bench", "bench_model": "bench_prefill", "kernel_check": "kernel_checks",
          "backends_here": "backend_lists", "memory_plan": "memory_plans"}

__all__ = ["CheckOptions", "Report", "Setup", "backends_here", "bench_kernels", "bench_model", "drift", "firsttoken",
           "firsttoken_endpoints", "kernel_check", "layer0", "logits", "logits_endpoints", "memory_plan",
           "power_curves", "selftest_suite", "sweep", "sweep_endpoints", "tasks", "tasks_compare", "union_stats",
           "verdict_rates"]


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'glmcheck.evaluate' has no attribute {name!r}")
    return getattr(importlib.import_module(f"glmcheck.evaluate.{_WHERE[name]}"), name)
