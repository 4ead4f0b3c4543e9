"""`glmcheck logits`: next-token logits over the full vocabulary, per backend and per length.

For each prompt length the reference runs twice (the control row), `reference:bf16` once (the
floor: an ideal bf16 kernel) and every backend once; the final-position logits are compared in
float64: cosine, rel-L2, max-abs, and whether the argmax is the same as the reference's.
Model-level differences are amplified by discrete decisions (expert routing, the indexer's
top-k), so single-length verdicts are noisy: read them beside the control and floor rows.
"""

from __future__ import annotations

from typing import Callable

import torch

from glmcheck.checks.common import FLOOR_BACKEND, INFO, ComparisonRow, Gate, band, compare, not_called_row, overall
from glmcheck.checks.layer0 import CheckResult
from glmcheck.checks.runner import SwapOptions, forward_under

# Model-level default bound: bf16 models drift; on `tiny` transformers' own sdpa vs eager
# differ by 3.9e-2 in logits rel-L2, the Triton kernel vs the fp32 reference by ~7e-3.
DEFAULT_MAX_REL_L2 = 5e-2


def _logits_row(label: str, name: str, reference: str, actual: torch.Tensor, expected: torch.Tensor,
                tokens: int, dense: bool) -> ComparisonRow:
    row = compare(label, name, reference, "logits", actual, expected, tokens=tokens,
                  note="dense attention (--dense-threshold)" if dense else "")
    same = int(actual.argmax()) == int(expected.argmax())
    row.extra = {"argmax": int(actual.argmax()), "ref_argmax": int(expected.argmax()), "argmax_same": same}
    return row


def run_logits(model: torch.nn.Module, prompts: list[torch.Tensor], backends: list[str], reference: str,
               options: SwapOptions = SwapOptions(), gate: Gate = Gate(max_rel_l2=DEFAULT_MAX_REL_L2),
               on_length: Callable[[int, list[ComparisonRow]], None] | None = None,
               done: dict[int, list[ComparisonRow]] | None = None) -> CheckResult:
    """Compare final logits for each prompt [1, N] in `prompts` (one per length).

    `done` maps lengths to rows already computed (a resumed run); those lengths are skipped.
    `on_length` is called after each newly computed length (progress, per-item records).
    """
    rows: list[ComparisonRow] = []
    tensors: dict[str, torch.Tensor] = {}
    num_layers = model.config.num_hidden_layers
    seconds: dict[str, float] = {}
    for input_ids in prompts:
        tokens = input_ids.shape[1]
        if done and tokens in done:
            rows += done[tokens]
            continue
        ref = forward_under(model, input_ids, reference, options)
        rerun = forward_under(model, input_ids, reference, options)
        tensors[f"logits/{reference}@{tokens}"] = ref.captured.logits[0, -1].float()
        dense = bool(ref.dense_layers)
        control = _logits_row(f"control: {reference} vs itself (rerun)", reference, reference,
                              rerun.captured.logits, ref.captured.logits, tokens, dense)
        floor_run = forward_under(model, input_ids, FLOOR_BACKEND, options)
        floor = _logits_row(f"floor: {FLOOR_BACKEND} vs {reference} (ideal bf16 kernel)", FLOOR_BACKEND,
                            reference, floor_run.captured.logits, ref.captured.logits, tokens, dense)
        floor.verdict = INFO
        limit = band(control, floor)
        control.verdict = gate.verdict(control.rel_l2, limit)
        length_rows = [control, floor]
        for name in dict.fromkeys(b for b in backends if b not in (reference, FLOOR_BACKEND)):
            run = forward_under(model, input_ids, name, options)
            seconds[f"{name}@{tokens}"] = round(run.seconds, 3)
            expected, seen = run.missing_calls(num_layers, options.tp)
            if expected:
                length_rows.append(not_called_row(name, reference, "logits", expected, seen, tokens=tokens))
                continue
            tensors[f"logits/{name}@{tokens}"] = run.captured.logits[0, -1].float()
            row = _logits_row(f"{name} vs {reference}", name, reference, run.captured.logits,
                              ref.captured.logits, tokens, dense)
            row.verdict = gate.verdict(row.rel_l2, limit)
            length_rows.append(row)
        rows += length_rows
        if on_length is not None:
            on_length(tokens, length_rows)
    facts = {"lengths": [p.shape[1] for p in prompts], "gate": gate.describe(), "seconds": seconds,
             "dense_threshold": options.dense_threshold}
    return CheckResult(rows, overall(rows), facts, tensors)
