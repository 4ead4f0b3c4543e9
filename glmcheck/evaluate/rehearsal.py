"""A rank rehearsal (`CheckOptions.rehearse_rank`, `--rehearse-rank R`): rank R's shard of a TP-`tp` model built
alone on one device, its all-reduces replaced by the identity, running a check's forwards end to end. It answers
"will rank R of this run fit, and how long is a forward" from one device: the weights held after the build, each
forward's peak memory (allocator and device, `glmcheck.model.forward_meter`) and time, against `glmcheck plan`'s
estimate for that prompt (`memory.plan_memory`, the same format; under --calls serving with the pool's term). The
model's numbers are a partial sum of one rank's heads and MLP slices: meaningless; the report has no verdict
(REHEARSAL, exit 4, every row's verdict '-') and its record a `rehearsal` field.
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

from glmcheck.checks.band import INFO, REHEARSAL
from glmcheck.model.forward_meter import ForwardMeter
from glmcheck.model.fp8_resident import held_bytes
from glmcheck.model.memory import GIB, device_bytes, plan_memory

NOTE = ("REHEARSAL: rank {rank} of --tp {tp} alone on {device}, its all-reduces replaced by the identity: the rows "
        "below are numbers of a partial model and mean nothing; no verdict (exit 4). What it measures: the memory "
        "and time of that rank's forwards")


def banner(setup) -> str:
    rank, tp = setup.rehearse
    return NOTE.format(rank=rank, tp=tp, device=setup.device)


def before_build(setup) -> float:
    """Called before the model is built: says loudly what runs, starts the build's clock."""
    if setup.is_main:
        print(f"warning: {banner(setup)}", file=sys.stderr)
    if setup.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(setup.device)
    return time.perf_counter()


def after_build(setup, model: torch.nn.Module, started: float) -> None:
    """Called once the shard is built: what it holds, then a meter on its forwards (`setup.meter`)."""
    if setup.device.type == "cuda":
        torch.cuda.synchronize(setup.device)
    allocated = torch.cuda.memory_allocated(setup.device) if setup.device.type == "cuda" else None
    setup.built = {"seconds": time.perf_counter() - started, "held": held_bytes(model), "allocated": allocated}
    say = (lambda line: print(f"rehearsal {line}", file=sys.stderr)) if setup.is_main else None
    setup.meter = ForwardMeter(model, setup.device, say)


def measured(setup) -> dict:
    """The record's `rehearsal` field (bytes, seconds): build, forwards grouped by (tokens, path) with the plan's
    estimate for each, peaks over the run."""
    meter: ForwardMeter = setup.meter
    meter.close()
    rank, tp = setup.rehearse
    device_total = device_bytes(setup.device)
    groups: dict[tuple[int, str], list] = {}
    for record in meter.records:
        groups.setdefault((record.tokens, record.path), []).append(record)
    forwards = []
    for (tokens, path), records in groups.items():
        serving = setup.options.engine is not None and path == "absorbed"  # hf_* rows are never engine-shaped
        plan = plan_memory(setup.config, tp, tokens, device_total / GIB, path, setup.spec.weights,
                           pool=setup.pool_size if serving else None)
        seconds = [r.seconds for r in records]
        allocated = [r.allocated for r in records if r.allocated is not None]
        forwards.append({"tokens": tokens, "path": path, "forwards": len(records),
                         "seconds_median": statistics.median(seconds), "seconds_max": max(seconds),
                         "allocated": max(allocated) if allocated else None, "device": max(r.device for r in records),
                         "plan": round(plan.total_gib_per_rank * GIB),
                         "plan_weights": round(plan.weights_gib_per_rank * GIB),
                         "plan_transient": round(plan.transient_gib * GIB),
                         "plan_activations": round(plan.activations_gib * GIB),
                         "plan_pool": round(plan.pool_gib * GIB)})
    peak_allocated, peak_device = meter.run_peaks()
    return {"rank": rank, "tp": tp, "device": str(setup.device), "device_bytes": device_total,
            "weights": setup.spec.weights, "build_seconds": setup.built["seconds"], "held": setup.built["held"],
            "allocated_after_build": setup.built["allocated"],
            "plan_weights": forwards[0]["plan_weights"] if forwards else None,
            "forwards": forwards, "peak_allocated": peak_allocated, "peak_device": peak_device, "note": banner(setup)}


def without_verdicts(value):
    """`value` (rows, summary fields) with every "verdict" set to '-': a rehearsal judges nothing."""
    if isinstance(value, dict):
        return {k: INFO if k == "verdict" else without_verdicts(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_verdicts(v) for v in value]
    return value


def conclude(setup, rows: list[dict], facts: dict, extra: dict) -> tuple[str, list[dict], dict, dict]:
    """(verdict, rows, facts, extra) of a rehearsal's report: no verdict anywhere, the measurements in `rehearsal`."""
    return REHEARSAL, without_verdicts(rows), without_verdicts(facts), {**without_verdicts(extra),
                                                                      "rehearsal": measured(setup)}
