"""`glmcheck drift`: where the error enters and how it grows, layer by layer.

One forward per backend, capturing every layer's output hidden state in fp64: the exact reference
twice and the band's N ideal bf16 kernels once each (`glmcheck.checks.band`), then every backend.
Rows: (backend, layer, cosine, rel-L2, max-abs) against the exact reference, with the band's
largest rel-L2 at that layer; a row passes when its rel-L2 <= gate ratio x that value.
"""

from __future__ import annotations

from pathlib import Path

import torch

from glmcheck.backends.names import band_names
from glmcheck.checks import metrics
from glmcheck.checks.band import DEFAULT_BAND, INFO, Band, Gate
from glmcheck.checks.layer0 import CheckResult
from glmcheck.checks.rows import ComparisonRow, cross_check_note, judge_row, overall, require_finite, unmeasured_row
from glmcheck.checks.runner import BackendRun, SwapOptions, forward_each


def _layer_rows(label: str, run: BackendRun, ref: BackendRun, layers: int, tokens: int,
                finite: metrics.FiniteCache) -> list[ComparisonRow]:
    rows = []
    for layer in range(layers):
        stats = metrics.pair_statistics(run.captured.hidden[layer], ref.captured.hidden[layer], finite=finite)
        row = ComparisonRow(label, run.name, ref.name, "hidden", stats["cosine"], stats["rel_l2"], stats["max_abs"],
                            tokens=tokens)
        row.extra = {"layer": layer}
        rows.append(row)
    return rows


def run_drift(model: torch.nn.Module, input_ids: torch.Tensor, backends: list[str], exact: str = "reference",
              options: SwapOptions = SwapOptions(), gate: Gate = Gate(), *, band_size: int = DEFAULT_BAND,
              progress=None, repro: Path | None = None) -> CheckResult:
    """Per-layer hidden-state drift of every backend against the exact reference (see module docstring). FAIL rows
    are diagnosed (`glmcheck.checks.diagnosis_runs`: facts["diagnoses"]) and, given a `repro` directory, each FAIL
    backend's first failing layer call is cut to a minimal repro there (facts["repros"])."""
    layers = model.config.num_hidden_layers
    tokens = input_ids.shape[1]
    variants = band_names(band_size)
    others = [b for b in dict.fromkeys(backends) if b != exact and b not in variants]

    def finite(name: str, run: BackendRun) -> None:  # NaN in the reference or band: bad input
        for layer in range(layers):
            require_finite(model, run.captured.hidden[layer], f"hidden state at layer {layer} ({tokens} tokens)",
                           name, exact)

    runs, faults = forward_each(model, input_ids, [exact, exact] + variants + others, options, 2 + band_size,
                                finite, progress, hidden_layers=range(layers))
    ref, cache = runs[0], metrics.FiniteCache()
    sample_rows = [_layer_rows(f"noise band: {exact} vs itself (rerun)", runs[1], ref, layers, tokens, cache)]
    sample_rows += [_layer_rows(f"noise band: {r.name} vs {exact}", r, ref, layers, tokens, cache)
                    for r in runs[2:2 + band_size]]
    bands = [Band({"rel_l2": [s[layer].rel_l2 for s in sample_rows]}, [exact] + variants) for layer in range(layers)]
    rows = [row for sample in sample_rows for row in sample]
    by_name = {r.name: r for r in runs[2 + band_size:]}
    for name in others:
        unmeasured = unmeasured_row(name, faults, by_name.get(name), exact, "hidden", layers, options.tp,
                                    tokens=tokens)
        if unmeasured is not None:
            rows.append(unmeasured)
            continue
        run = by_name[name]
        for layer, row in enumerate(_layer_rows(f"{run.name} vs {exact}", run, ref, layers, tokens, cache)):
            row.extra["band_max_rel_l2"] = bands[layer].summary()[2]
            if run.absorbed:
                judge_row(row, gate, bands[layer])
            else:
                row.verdict, row.note = INFO, cross_check_note(options)
            rows.append(row)
    facts = {"tokens": tokens, "layers": layers, "gate": gate.describe(), "exact": exact, "band_size": band_size,
             "seconds": {r.name: round(r.seconds, 3) for r in runs}}
    from glmcheck.checks.diagnosis_runs import diagnose_drift

    diagnoses, repros = diagnose_drift(model, input_ids, rows, ref, runs[2:2 + band_size], by_name, exact, options,
                                       gate, band_size=band_size, repro=repro)
    facts |= {"diagnoses": diagnoses} | ({"repros": repros} if repro is not None else {})
    return CheckResult(rows, overall(rows), facts)
