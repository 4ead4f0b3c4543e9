"""`glmcheck logits`: next-token logits over the full vocabulary, per backend and per length.

For each prompt length the exact reference runs twice and the band's N ideal bf16 kernels once
each (`glmcheck.checks.band`), then every backend once; the final-position logits are compared in
float64: cosine, rel-L2 to the exact reference (the judged distance), max-abs, the distance to
the baseline kernel when there is one, and whether the argmax is the exact reference's.
Model-level differences are amplified by discrete decisions (expert routing, the indexer's
top-k), which is why the band has several samples.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch

from glmcheck.backends.errors import KernelFault
from glmcheck.checks.band import DEFAULT_BAND, Gate, band_from_rows, band_names, pairwise_median
from glmcheck.checks.common import (
    ComparisonRow,
    compare,
    cross_check_note,
    fault_row,
    judge_row,
    not_called_row,
    overall,
    require_finite,
)
from glmcheck.checks.layer0 import CheckResult
from glmcheck.checks.runner import SwapOptions, forward_under


def _logits_row(label: str, name: str, reference: str, actual: torch.Tensor, expected: torch.Tensor,
                tokens: int, dense: bool) -> ComparisonRow:
    row = compare(label, name, reference, "logits", actual, expected, tokens=tokens,
                  note="dense attention (--dense-threshold)" if dense else "")
    same = int(actual.argmax()) == int(expected.argmax())
    row.extra = {"argmax": int(actual.argmax()), "ref_argmax": int(expected.argmax()), "argmax_same": same}
    return row


def _length_rows(model, input_ids: torch.Tensor, backends: list[str], exact: str, options: SwapOptions,
                 gate: Gate, band_size: int, baseline: str | None, seconds: dict,
                 tensors: dict) -> list[ComparisonRow]:
    """The band rows and every backend's row at one prompt length."""
    tokens, num_layers = input_ids.shape[1], model.config.num_hidden_layers
    what = f"logits at {tokens} tokens"

    def band_logits(name: str) -> torch.Tensor:
        logits = forward_under(model, input_ids, name, options).captured.logits
        require_finite(model, logits, what, name, exact)  # NaN in the reference or band: bad input
        return logits

    ref = forward_under(model, input_ids, exact, options)
    require_finite(model, ref.captured.logits, what, exact, exact)
    dense = bool(ref.dense_layers)
    tensors[f"logits/{exact}@{tokens}"] = ref.captured.logits[0, -1].float()
    variants = band_names(band_size)
    samples = [_logits_row(f"noise band: {exact} vs itself (rerun)", exact, exact, band_logits(exact),
                           ref.captured.logits, tokens, dense)]
    ideal = []
    for name in variants:
        ideal.append(band_logits(name))
        samples.append(_logits_row(f"noise band: {name} vs {exact} (ideal bf16 kernel)", name, exact,
                                   ideal[-1], ref.captured.logits, tokens, dense))
    band = replace(band_from_rows(samples, [exact] + variants), apart=pairwise_median(ideal))
    rows, outputs = list(samples), {}
    for name in dict.fromkeys(b for b in backends if b != exact and b not in variants):
        try:
            run = forward_under(model, input_ids, name, options)
        except KernelFault as fault:
            rows.append(fault_row(fault, exact, "logits", tokens=tokens))
            continue
        seconds[f"{name}@{tokens}"] = round(run.seconds, 3)
        expected, seen = run.missing_calls(num_layers, options.tp)
        if expected:
            rows.append(not_called_row(name, exact, "logits", expected, seen, tokens=tokens))
            continue
        outputs[name] = (run.captured.logits, run.absorbed)
        tensors[f"logits/{name}@{tokens}"] = run.captured.logits[0, -1].float()
        row = _logits_row(f"{name} vs {exact}", name, exact, run.captured.logits, ref.captured.logits, tokens, dense)
        row.extra |= {"kernel_calls": sum(run.calls.values()), "plan_builds": sum(run.plan_builds.values())}
        if run.absorbed:
            judge_row(row, gate, band)
        else:
            row.note = cross_check_note(options)
        rows.append(row)
    if baseline in outputs:
        for row in rows[len(samples):]:
            if row.backend in outputs and row.backend != baseline:
                actual, expected = outputs[row.backend][0], outputs[baseline][0]
                row.extra[f"rel_l2_vs_{baseline}"] = compare("", "", "", "", actual, expected).rel_l2
    for row in rows:
        row.extra["band_max_rel_l2"] = band.summary()[2]
    return rows


def run_logits(model: torch.nn.Module, prompts: list[torch.Tensor], backends: list[str], exact: str = "reference",
               options: SwapOptions = SwapOptions(), gate: Gate = Gate(), *, band_size: int = DEFAULT_BAND,
               baseline: str | None = None, on_length: Callable[[int, list[ComparisonRow]], None] | None = None,
               done: dict[int, list[ComparisonRow]] | None = None) -> CheckResult:
    """Compare final logits for each prompt [1, N] in `prompts` (one per length).

    `done` maps lengths to rows already computed (a resumed run); those lengths are skipped.
    `on_length` is called after each newly computed length (progress, per-item records).
    """
    rows: list[ComparisonRow] = []
    tensors: dict[str, torch.Tensor] = {}
    seconds: dict[str, float] = {}
    for input_ids in prompts:
        tokens = input_ids.shape[1]
        if done and tokens in done:
            rows += done[tokens]
            continue
        length_rows = _length_rows(model, input_ids, backends, exact, options, gate, band_size, baseline,
                                   seconds, tensors)
        rows += length_rows
        if on_length is not None:
            on_length(tokens, length_rows)
    facts = {"lengths": [p.shape[1] for p in prompts], "gate": gate.describe(), "seconds": seconds,
             "dense_threshold": options.dense_threshold, "exact": exact, "baseline": baseline, "band_size": band_size}
    return CheckResult(rows, overall(rows), facts, tensors)
