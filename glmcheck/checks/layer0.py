"""`glmcheck layer0`: the layer-0 attention output of every backend against the exact reference.

Absorbed backends are compared on the latent output [T, H, kv_lora]; an hf backend (transformers'
own attention, no latent) on the per-head value output [T, H, v_head_dim], as a cross-check of the
reference that is not gated (bf16 end to end; under an FP8 KV cache it never sees the FP8 rows).
The band (`glmcheck.checks.band`): the exact reference rerun and N ideal bf16 kernels. Each row
is judged on its rel-L2, its largest per-token rel-L2, its scale bias and its temperature bias;
with a baseline kernel (FlashMLA when present) every row also gives its distance to the baseline.

The temperature bias projects a row's difference from the exact output on that output's derivative
in the softmax scale's relative change, taken as a finite difference: the exact reference run once
more at softmax scale x (1 + TEMPER_STEP). bf16 rounding is spread over every direction, a scale
error lies along that one, so the projection finds a scale off by 0.1 % that rel-L2 cannot tell
from rounding (docs/reliability.md, "Temperature bias").
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from glmcheck.backends.names import band_names
from glmcheck.backends.registry import get_backend, register_backend, unregister_backend
from glmcheck.checks.band import DEFAULT_BAND, Gate, band_from_rows, ideal_kind
from glmcheck.checks.metrics import TEMPER_STEP
from glmcheck.checks.rows import (
    ComparisonRow,
    compare,
    cross_check_note,
    judge_row,
    overall,
    require_finite,
    unmeasured_row,
)
from glmcheck.checks.runner import BackendRun, SwapOptions, forward_each, forward_under

LAYER0_STATS = ("rel_l2", "token_max_rel_l2", "scale_bias", "temperature_bias")
TEMPERED_SUFFIX = "@tempered"


@dataclass
class CheckResult:
    """Rows, overall verdict, run facts and the tensors worth saving (or a zero-argument function making them, so
    that copies are made only when `--save-tensors` asks)."""

    rows: list[ComparisonRow]
    verdict: str
    facts: dict = field(default_factory=dict)
    tensors: dict[str, torch.Tensor] | Callable[[], dict[str, torch.Tensor]] = field(default_factory=dict)


def _per_token_name(name: str) -> str | None:
    return name.split(":")[0] if ":union" in name else None


@contextmanager
def tempered(exact: str):
    """The backend `exact` at softmax scale x (1 + TEMPER_STEP), registered as `exact@tempered` while in use."""
    name = exact + TEMPERED_SUFFIX
    base = get_backend(exact).fn

    def run_tempered(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
        return base(q, kv, indices, sm_scale * (1 + TEMPER_STEP), d_v, topk_length=topk_length)

    register_backend(name, run_tempered, f"{exact} at softmax scale x (1 + {TEMPER_STEP:g}): layer0's temperature "
                                         f"direction", source="glmcheck.checks.layer0", fp32_output=True)
    try:
        yield name
    finally:
        unregister_backend(name)


def _compare_runs(label: str, run: BackendRun, ref: BackendRun, ref_name: str, tokens: int,
                  per_token: bool = True, temperature: torch.Tensor | None = None) -> ComparisonRow:
    if run.absorbed and ref.absorbed:
        return compare(label, run.name, ref_name, "latent", run.captured.latent[0], ref.captured.latent[0],
                       tokens=tokens, per_token=per_token, temperature=temperature)
    return compare(f"{label} (per-head value output)", run.name, ref_name, "value",
                   run.captured.value[0], ref.captured.value[0], tokens=tokens, per_token=per_token)


def run_layer0(model: torch.nn.Module, input_ids: torch.Tensor, backends: list[str], exact: str = "reference",
               options: SwapOptions = SwapOptions(), gate: Gate = Gate(), *, band_size: int = DEFAULT_BAND,
               baseline: str | None = None, progress=None, repro: Path | None = None) -> CheckResult:
    """Run the exact reference twice (and once tempered: the temperature direction), the band's variants and
    every backend once; judge each row. `baseline` (one of `backends`) adds every row's distance to that
    backend's output. `progress` is updated once a forward (3 + band_size + the other backends). FAIL rows are
    diagnosed (`glmcheck.checks.diagnosis_runs`: facts["diagnoses"]) and, given a `repro` directory, cut to a
    minimal repro there (facts["repros"])."""
    tokens = input_ids.shape[1]
    variants = band_names(band_size)
    others = [b for b in dict.fromkeys(backends) if b != exact and b not in variants]

    def finite(name: str, run: BackendRun) -> None:  # the reference and the band: NaN there is bad input
        output = run.captured.latent[0] if run.absorbed else run.captured.value[0]
        require_finite(model, output, f"layer-0 output ({tokens} tokens)", name, exact)

    runs, faults = forward_each(model, input_ids, [exact, exact] + variants + others, options, 2 + band_size,
                                finite, progress, latent_layers=[0], value_layers=[0])
    ref, by_name = runs[0], {r.name: r for r in runs[2 + band_size:]}
    direction = _temperature_direction(model, input_ids, exact, options, ref, tokens, progress)
    samples = [_compare_runs(f"noise band: {exact} vs itself (rerun)", runs[1], ref, exact, tokens,
                             temperature=direction)]
    samples += [_compare_runs(f"noise band: {r.name} vs {exact} ({ideal_kind(r.name, options.kv_cache_dtype)})", r,
                              ref, exact, tokens,
                              temperature=direction) for r in runs[2:2 + band_size]]
    band = band_from_rows(samples, [exact] + variants)
    rows = list(samples)
    num_layers = model.config.num_hidden_layers
    base = by_name.get(baseline) if baseline else None
    for name in others:
        unmeasured = unmeasured_row(name, faults, by_name.get(name), exact, "latent", num_layers, options.tp,
                                    tokens=tokens)
        if unmeasured is not None:
            rows.append(unmeasured)
            continue
        run = by_name[name]
        row = _compare_runs(f"{name} vs {exact}", run, ref, exact, tokens, temperature=direction)
        if base is not None and run is not base and run.absorbed == base.absorbed:
            row.extra[f"rel_l2_vs_{baseline}"] = _compare_runs("", run, base, baseline, tokens, False).rel_l2
        if not run.absorbed:
            row.note = cross_check_note(options)
        else:
            judge_row(row, gate, band)
        rows.append(row)
        pair_base = _per_token_name(name)
        if pair_base in by_name and run.absorbed:
            pair = _compare_runs(f"{name} vs {pair_base} (per-token)", run, by_name[pair_base], pair_base, tokens,
                                 False)
            judge_row(pair, gate, band)
            rows.append(pair)
    facts = {"tokens": tokens, "gate": gate.describe(LAYER0_STATS), "band": band.as_dict(),
             "band_summary": band.describe(), "exact": exact, "baseline": baseline,
             "seconds": {r.name: round(r.seconds, 3) for r in runs}, "calls": {r.name: dict(r.calls) for r in runs},
             "plan_builds": {r.name: dict(r.plan_builds) for r in runs}}
    if ref.absorbed:
        from glmcheck.checks.diagnosis_runs import diagnose_layer0

        diagnoses, repros = diagnose_layer0(model, input_ids, rows, by_name, runs[2:2 + band_size], band, exact,
                                            ref.captured.latent[0], options, direction, repro=repro, gate=gate)
        facts |= {"diagnoses": diagnoses} | ({"repros": repros} if repro is not None else {})
    kept = [ref, *by_name.values()]
    return CheckResult(rows, overall(rows), facts, lambda: _tensors(kept))


def _temperature_direction(model: torch.nn.Module, input_ids: torch.Tensor, exact: str, options: SwapOptions,
                           ref: BackendRun, tokens: int, progress) -> torch.Tensor | None:
    """d(exact latent output) / d(relative softmax scale), fp64 [T, H, kv_lora] (None: no latent output)."""
    if not ref.absorbed:
        return None
    with tempered(exact) as name:
        run = forward_under(model, input_ids, name, options, latent_layers=[0])
    if progress is not None:
        progress.update(1)
    output = run.captured.latent[0]
    require_finite(model, output, f"layer-0 output at a tempered softmax scale ({tokens} tokens)", exact, exact)
    return (output.double() - ref.captured.latent[0].double()) / TEMPER_STEP


def _tensors(runs: list[BackendRun]) -> dict[str, torch.Tensor]:
    """Layer-0 outputs by backend, in fp32 (saved with --save-tensors)."""
    tensors = {}
    for run in runs:
        if 0 in run.captured.latent:
            tensors[f"latent/{run.name}"] = run.captured.latent[0].float()
        tensors[f"value/{run.name}"] = run.captured.value[0].float()
    return tensors
