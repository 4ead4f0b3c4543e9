"""The diagnosis as layer0 and drift run it: only for their FAIL rows, from what they captured.

layer0 (`diagnose_layer0`): the layer-0 outputs every backend produced are already captured; the exact reference's
forward is run once more, its kernel call kept (`diagnosis_calls.record_calls`), for the exact output in fp64 and
the slot-level attribution. A run whose rows all pass does none of it.

drift (`diagnose_drift`): per FAIL (backend, layer) row, the tokens that carry the hidden state's error, and that
layer's attention alone: the backend's kernel on the reference's own inputs at that layer beside the band's ideal
kernels on them (`diagnosis_calls.check_call`). Beyond the band, the error enters at that layer and the call is
diagnosed as layer0's; within it, the layer's error comes from an earlier one.

Each returns the record's `diagnoses` (a list of {"row", "backend", ["layer"], "findings", "profile", ...}) and, with
`repro` a directory, writes a minimal repro of each failing call there (`glmcheck.checks.repro`).
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from glmcheck.backends.registry import get_backend
from glmcheck.checks.band import DEFAULT_BAND, FAIL, Band, Gate
from glmcheck.checks.diagnosis import diagnose, hidden_finding
from glmcheck.checks.diagnosis_calls import LayerCall, check_call, record_calls
from glmcheck.checks.diagnosis_structure import Finding
from glmcheck.process.phases import CLOCK


def failing(rows: list, runs: dict) -> list:
    """The FAIL rows that compare an absorbed backend's captured output with the exact reference."""
    return [r for r in rows if r.verdict == FAIL and r.measured and r.backend in runs and runs[r.backend].absorbed
            and not r.comparison.startswith("noise band:") and "(per-token)" not in r.comparison]


class _Clock:
    """Adds the block's wall time to the phase `name`, less the forwards and metrics it runs (counted there)."""

    def __init__(self, name: str = "diagnose"):
        self.name = name

    def _inside(self) -> float:
        return CLOCK.seconds.get("forwards", 0.0) + CLOCK.seconds.get("compare", 0.0)

    def __enter__(self):
        self.start, self.others = time.perf_counter(), self._inside()
        return self

    def __exit__(self, *exc):
        CLOCK.add(self.name, max(time.perf_counter() - self.start - (self._inside() - self.others), 0.0))


def diagnose_layer0(model: torch.nn.Module, input_ids: torch.Tensor, rows: list, runs: dict, band_runs: list,
                    band: Band, exact: str, exact_output: torch.Tensor, options, direction: torch.Tensor | None, *,
                    repro: Path | None = None, gate: Gate = Gate()) -> tuple[list[dict], list[dict]]:
    """(diagnoses, repros) of layer0's FAIL rows (module docstring); ([], []) when none fails. `runs` the backends'
    runs by name, `band_runs` the band's ideal variants', `exact_output` the exact reference's latent output."""
    bad = failing(rows, runs)
    if not bad:
        return [], []
    with _Clock():
        calls = record_calls(model, input_ids, exact, options, layers=1)
        call = calls[0] if calls else None
        band_outputs = [r.captured.latent[0] for r in band_runs]
        exact64 = call.exact() if call is not None else exact_output.double()
        diagnoses = []
        for row in bad:
            found = diagnose(exact64, runs[row.backend].captured.latent[0], band_outputs, call=call,
                             stats={**row.stats(), "rel_l2": row.rel_l2}, band_stats=band, direction=direction)
            diagnoses.append({"row": row.comparison, "backend": row.backend, **found})
    repros = []
    if repro is not None and call is not None:
        from glmcheck.checks.repro import write_repro

        with _Clock("repro"):
            for entry in diagnoses:
                repros.append(write_repro(call, entry["backend"], Path(repro), options=options, gate=gate,
                                          hints=entry, what=f"{entry['row']} (layer0, layer 0)"))
    return diagnoses, repros


def _kernel(name: str, options):
    return get_backend(name, deterministic=options.deterministic, kv_cache_dtype=options.kv_cache_dtype)


def layer_verdict(check, layer: int) -> Finding:
    """A line on a layer's attention alone: beyond the band (the error enters there) or within it."""
    row = check.row
    limit = row.extra.get("margin", float("nan"))
    if row.verdict == FAIL:
        text = (f"layer {layer}'s attention alone (the kernel on the reference's inputs there) FAILS: rel-L2 "
                f"{row.rel_l2:.3e}, {limit:.3g}x its gate ({row.note}): the error enters here")
    else:
        text = (f"layer {layer}'s attention alone (the kernel on the reference's inputs there) is {row.verdict} "
                f"({limit:.2g}x its gate): this layer's error comes from an earlier one")
    return Finding("call", text, limit, {"verdict": row.verdict, "margin": limit, "rel_l2": row.rel_l2,
                                         "note": row.note})


def diagnose_drift(model: torch.nn.Module, input_ids: torch.Tensor, rows: list, ref, band_runs: list, runs: dict,
                   exact: str, options, gate: Gate, *, band_size: int = DEFAULT_BAND,
                   repro: Path | None = None) -> tuple[list[dict], list[dict]]:
    """(diagnoses, repros) of drift's FAIL rows (module docstring); ([], []) when none fails."""
    bad = [r for r in failing(rows, runs) if r.extra.get("layer") is not None]
    if not bad:
        return [], []
    diagnoses, checks = [], {}
    with _Clock():
        calls: list[LayerCall] = record_calls(model, input_ids, exact, options)
        for row in bad:
            layer = int(row.extra["layer"])
            hidden, positions = hidden_finding(ref.captured.hidden[layer], runs[row.backend].captured.hidden[layer],
                                               [b.captured.hidden[layer] for b in band_runs])
            entry = {"row": row.comparison, "backend": row.backend, "layer": layer, "findings": [],
                     "profile": {"positions": positions}}
            if layer < len(calls):
                key = (row.backend, layer)
                if key not in checks:
                    checks[key] = check_call(calls[layer], _kernel(row.backend, options), band_size=band_size,
                                             gate=gate, kv_cache_dtype=options.kv_cache_dtype, label=row.backend)
                check = checks[key]
                entry["findings"].append(layer_verdict(check, layer).as_dict())
                if check.row.verdict == FAIL:
                    found = diagnose(check.exact, check.output, check.band_outputs, call=calls[layer],
                                     stats={**check.row.stats(), "rel_l2": check.row.rel_l2},
                                     band_stats=check.band, direction=check.direction)
                    entry["findings"] += found["findings"]
                    entry["profile"] |= {"heads": found["profile"]["heads"],
                                         "call_positions": found["profile"]["positions"]}
            if hidden is not None:
                entry["findings"].append(hidden.as_dict())
            diagnoses.append(entry)
    repros = []
    if repro is not None:
        from glmcheck.checks.repro import write_repro

        done = set()
        with _Clock("repro"):
            for entry in diagnoses:
                key = (entry["backend"], entry["layer"])
                if entry["backend"] in done or key not in checks or checks[key].row.verdict != FAIL:
                    continue
                done.add(entry["backend"])
                repros.append(write_repro(calls[entry["layer"]], entry["backend"], Path(repro), options=options,
                                          gate=gate, hints=entry,
                                          what=f"{entry['row']} (drift, layer {entry['layer']})"))
    return diagnoses, repros
