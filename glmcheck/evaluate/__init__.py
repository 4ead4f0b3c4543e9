"""One library call per check, as lm-evaluation-harness's `simple_evaluate` is one call: each takes a
model (`CheckOptions`) or endpoints plus the check's own options and returns a `Report` (rows,
verdict, facts) that the CLI prints and writes; notebooks and tests call the same functions.

    from glmcheck.evaluate import CheckOptions, layer0
    report = layer0(CheckOptions(model="ref-cpu"), tokens=128)

Names are imported on first use, so `import glmcheck.evaluate` stays light.
"""

from __future__ import annotations

import importlib

_WHERE = {"CheckOptions": "options", "Report": "report", "Setup": "setup", "layer0": "model_checks",
          "logits": "model_checks", "firsttoken": "model_checks", "drift": "model_checks", "sweep": "length_sweep",
          "firsttoken_endpoints": "endpoint_checks",
          "sweep_endpoints": "endpoint_sweep", "logits_endpoints": "endpoint_sweep",
          "tasks": "task_checks", "tasks_compare": "task_checks", "union_stats": "union_stats",
          "selftest_suite": "selftest_suite", "verdict_rates": "selftest_rates", "power_curves": "selftest_rates",
          "bench_kernels": "bench_kernels", "bench_model": "bench_prefill"}

__all__ = ["CheckOptions", "Report", "Setup", "bench_kernels", "bench_model", "drift", "firsttoken",
           "firsttoken_endpoints", "layer0", "logits", "logits_endpoints", "power_curves", "selftest_suite", "sweep",
           "sweep_endpoints", "union_stats", "verdict_rates"]


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'glmcheck.evaluate' has no attribute {name!r}")
    return getattr(importlib.import_module(f"glmcheck.evaluate.{_WHERE[name]}"), name)
