"""`glmcheck layer0`: the layer-0 attention output of every backend against the reference.

Absorbed backends are compared on the latent output [T, H, kv_lora]; a row with an hf backend
(transformers' own attention, no latent) on the per-head value output [T, H, v_head_dim].
The first row is the control: the reference against a second run of itself; the second the
floor: the reference rounded to bf16 (an ideal bf16 kernel) against the reference.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from glmcheck.checks.common import FLOOR_BACKEND, INFO, ComparisonRow, Gate, band, compare, not_called_row, overall
from glmcheck.checks.runner import BackendRun, SwapOptions, forward_under

DEFAULT_MAX_REL_L2 = 1e-2  # bf16-output class: fp32 reference vs bf16 kernels ~2e-3, hf_sdpa ~6e-3


@dataclass
class CheckResult:
    """Rows, overall verdict, run facts and the tensors worth saving."""

    rows: list[ComparisonRow]
    verdict: str
    facts: dict = field(default_factory=dict)
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)


def _per_token_name(name: str) -> str | None:
    return name.split(":")[0] if ":union" in name else None


def _compare_runs(label: str, run: BackendRun, ref: BackendRun, ref_name: str, tokens: int) -> ComparisonRow:
    if run.absorbed and ref.absorbed:
        return compare(label, run.name, ref_name, "latent", run.captured.latent[0], ref.captured.latent[0],
                       tokens=tokens)
    return compare(f"{label} (per-head value output)", run.name, ref_name, "value",
                   run.captured.value[0], ref.captured.value[0], tokens=tokens)


def run_layer0(model: torch.nn.Module, input_ids: torch.Tensor, backends: list[str], reference: str,
               options: SwapOptions = SwapOptions(), gate: Gate = Gate(max_rel_l2=DEFAULT_MAX_REL_L2),
               progress=None) -> CheckResult:
    """Run the reference twice and every backend once; return the comparison rows."""
    tokens = input_ids.shape[1]
    others_names = [b for b in dict.fromkeys(backends) if b not in (reference, FLOOR_BACKEND)]
    names = [reference, reference, FLOOR_BACKEND] + others_names
    runs: list[BackendRun] = []
    for name in names:
        runs.append(forward_under(model, input_ids, name, options, latent_layers=[0], value_layers=[0]))
        if progress is not None:
            progress.update(1)
    ref, rerun, floor_run, others = runs[0], runs[1], runs[2], {r.name: r for r in runs[3:]}
    control = _compare_runs(f"control: {reference} vs itself (rerun)", rerun, ref, reference, tokens)
    floor = _compare_runs(f"floor: {FLOOR_BACKEND} vs {reference} (ideal bf16 kernel)", floor_run, ref,
                          reference, tokens)
    floor.verdict = INFO
    limit = band(control, floor)
    control.verdict = gate.verdict(control.rel_l2, limit)
    rows = [control, floor]
    num_layers = model.config.num_hidden_layers
    for name, run in others.items():
        expected, seen = run.missing_calls(num_layers, options.tp)
        if expected:
            rows.append(not_called_row(name, reference, "latent", expected, seen, tokens=tokens))
            continue
        row = _compare_runs(f"{name} vs {reference}", run, ref, reference, tokens)
        row.verdict = gate.verdict(row.rel_l2, limit)
        rows.append(row)
        base = _per_token_name(name)
        if base in others:
            pair = _compare_runs(f"{name} vs {base} (per-token)", run, others[base], base, tokens)
            pair.verdict = gate.verdict(pair.rel_l2, limit)
            rows.append(pair)
    facts = {"tokens": tokens, "gate": gate.describe(), "seconds": {r.name: round(r.seconds, 3) for r in runs},
             "calls": {r.name: dict(r.calls) for r in runs}}
    return CheckResult(rows, overall(rows), facts, _tensors([ref, *others.values()]))


def _tensors(runs: list[BackendRun]) -> dict[str, torch.Tensor]:
    """Layer-0 outputs by backend, in fp32 (saved with --save-tensors)."""
    tensors = {}
    for run in runs:
        if 0 in run.captured.latent:
            tensors[f"latent/{run.name}"] = run.captured.latent[0].float()
        tensors[f"value/{run.name}"] = run.captured.value[0].float()
    return tensors
