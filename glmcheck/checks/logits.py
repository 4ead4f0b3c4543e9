"""`glmcheck logits`: next-token distributions over the full vocabulary, per backend and per length.

For each prompt length the exact reference runs twice and the band's N ideal bf16 kernels once
each (`glmcheck.checks.band`), then every backend once, each forward keeping the logits of every position.
Judged: every position of the forward (`glmcheck.checks.positions`: KL(reference || row) per position, its mean
with a block-bootstrap interval, percentiles, the same-top rate) beside the band's KL at the same positions
(`glmcheck.checks.position_gate`). Shown beside it, the final position alone (the seed's table): cosine, rel-L2
to the exact reference, max-abs, the distance to the baseline kernel when there is one, and whether the argmax is
the exact reference's. One position is one noisy sample: model-level differences are amplified by discrete
decisions (expert routing, the indexer's top-k), so its rel-L2 is informational.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch

from glmcheck.backends.errors import KernelFault
from glmcheck.backends.names import band_names
from glmcheck.checks.band import DEFAULT_BAND, FAIL, band_from_rows, ideal_kind, pairwise_median
from glmcheck.checks.diagnosis_positions import beyond_summary, layer0_probe, probe_text, summary_text
from glmcheck.checks.layer0 import CheckResult
from glmcheck.checks.position_gate import PositionBand, PositionGate
from glmcheck.checks.positions import PositionStatistics, position_statistics, summarize
from glmcheck.checks.rows import (
    ComparisonRow,
    compare,
    cross_check_note,
    fault_row,
    not_called_row,
    overall,
    require_finite,
)
from glmcheck.checks.runner import SwapOptions, forward_under
from glmcheck.startup import compile_ahead


def _logits_row(label: str, name: str, reference: str, actual: torch.Tensor, expected: torch.Tensor,
                tokens: int, dense: bool, positions: PositionStatistics | None = None) -> ComparisonRow:
    """A row: the final position's distances (actual / expected [1, T, vocab]: their last position) and, given
    `positions`, the summary of every position's (`positions.summarize`)."""
    last, ref_last = actual[:, -1:], expected[:, -1:]
    row = compare(label, name, reference, "logits", last, ref_last, tokens=tokens,
                  note="dense attention (--dense-threshold)" if dense else "")
    same = int(last.argmax()) == int(ref_last.argmax())
    row.extra = {"argmax": int(last.argmax()), "ref_argmax": int(ref_last.argmax()), "argmax_same": same}
    if positions is not None:
        row.extra |= summarize(positions)
        row.extra["kl_by_position"] = [round(float(v), 9) for v in positions.distance.tolist()]  # the logits plot
    return row


def _judge_positions(row: ComparisonRow, positions: PositionStatistics, band: PositionBand,
                     gate: PositionGate) -> None:
    """The row's verdict from every position (`PositionGate`), its measures and margin in extra, why in the note."""
    row.verdict, why, measures = gate.judge(positions, band)
    row.extra |= measures
    row.note = "; ".join(x for x in (row.note, why) if x)


def _length_rows(model, input_ids: torch.Tensor, backends: list[str], exact: str, options: SwapOptions,
                 position_gate: PositionGate, band_size: int, baseline: str | None, seconds: dict,
                 tensors: dict, progress=None) -> list[ComparisonRow]:
    """The band rows and every backend's row at one prompt length (`progress` updated once a forward)."""
    tokens, num_layers = input_ids.shape[1], model.config.num_hidden_layers
    what = f"logits at {tokens} tokens"

    def run(name: str, record_calls: bool = False):
        try:
            return forward_under(model, input_ids, name, options, last_logits=tokens, record_calls=record_calls)
        finally:
            if progress is not None:
                progress.update(1)

    def band_logits(name: str) -> torch.Tensor:
        logits = run(name).captured.logits
        require_finite(model, logits, what, name, exact)  # NaN in the reference or band: bad input
        return logits

    ref = run(exact, compile_ahead.enabled(input_ids.device))
    compile_ahead.after(ref, band_names(band_size) + list(backends), options)
    reference = ref.captured.logits
    require_finite(model, reference, what, exact, exact)
    dense = bool(ref.dense_layers)
    # last positions kept as copies: a view of one keeps a forward's whole [1, T, vocab] logits alive (2.4 GiB at 8192
    # tokens of GLM-5.2's vocabulary), and with one per band variant and backend the check grew a forward at a time
    tensors[f"logits/{exact}@{tokens}"] = reference[0, -1].to(torch.float32, copy=True)
    variants = band_names(band_size)
    following = torch.cat([input_ids[0, 1:], input_ids.new_full((1,), -1)])  # the text's next token (llama.cpp's)
    rerun = band_logits(exact)
    samples = [_logits_row(f"noise band: {exact} vs itself (rerun)", exact, exact, rerun, reference, tokens, dense,
                           position_statistics(rerun, reference, following))]
    del rerun
    ideal, ideal_positions = [], []
    for name in variants:
        logits = band_logits(name)
        ideal.append(logits[:, -1:].clone())
        ideal_positions.append(position_statistics(logits, reference, following))
        samples.append(_logits_row(f"noise band: {name} vs {exact} ({ideal_kind(name, options.kv_cache_dtype)})",
                                   name, exact, logits,
                                   reference, tokens, dense, ideal_positions[-1]))
        del logits  # the next forward runs without this one's logits
    band = replace(band_from_rows(samples, [exact] + variants), apart=pairwise_median(ideal))
    position_band = PositionBand.of(ideal_positions, variants)
    rows, outputs = list(samples), {}
    for name in dict.fromkeys(b for b in backends if b != exact and b not in variants):
        try:
            run_ = run(name)
        except KernelFault as fault:
            rows.append(fault_row(fault, exact, "logits", tokens=tokens))
            continue
        seconds[f"{name}@{tokens}"] = round(run_.seconds, 3)
        expected, seen = run_.missing_calls(num_layers, options.tp)
        if expected:
            rows.append(not_called_row(name, exact, "logits", expected, seen, tokens=tokens))
            continue
        logits = run_.captured.logits
        outputs[name] = logits[:, -1:].clone()
        tensors[f"logits/{name}@{tokens}"] = logits[0, -1].to(torch.float32, copy=True)
        positions = position_statistics(logits, reference, following)
        row = _logits_row(f"{name} vs {exact}", name, exact, logits, reference, tokens, dense, positions)
        row.extra |= {"kernel_calls": sum(run_.calls.values()), "plan_builds": sum(run_.plan_builds.values())}
        if run_.absorbed:
            _judge_positions(row, positions, position_band, position_gate)
            row.extra |= NO_DIAGNOSIS  # every judged row has the columns (a record's format does not hang on a FAIL)
            if row.verdict == FAIL:
                summary = beyond_summary(positions.distance,
                                         position_band.allowed(position_gate.position_ratio, position_gate.neighbours))
                row.extra |= {"beyond_first": summary["first"], "diagnosis": summary_text(summary),
                              "beyond_runs": ", ".join(f"{a}-{b}" for a, b in summary["runs"]),
                              "beyond_period": "{1} mod {0}".format(*summary["period"]) if summary["period"] else ""}
        else:
            row.note = cross_check_note(options)
        rows.append(row)
        del run_, logits
    _probe_layer0(model, input_ids, rows[len(samples):], exact, options, band_size)
    if baseline in outputs:
        for row in rows[len(samples):]:
            if row.backend in outputs and row.backend != baseline:
                actual, expected = outputs[row.backend], outputs[baseline]
                row.extra[f"rel_l2_vs_{baseline}"] = compare("", "", "", "", actual, expected).rel_l2
    for row in rows:
        row.extra["band_max_rel_l2"] = band.summary()[2]
    return rows


NO_DIAGNOSIS = {"diagnosis": "", "beyond_first": None, "beyond_runs": "", "beyond_period": "", "layer0": ""}


def _probe_layer0(model, input_ids: torch.Tensor, rows: list[ComparisonRow], exact: str, options: SwapOptions,
                  band_size: int) -> None:
    """For the FAIL rows: whether their kernel fails layer 0 of this prompt too (`diagnosis_positions.layer0_probe`),
    in each row's extra (layer0: its verdict there) and diagnosis."""
    failing = [r for r in rows if r.extra.get("diagnosis")]
    if not failing:
        return
    probes = layer0_probe(model, input_ids, list(dict.fromkeys(r.backend for r in failing)), exact, options,
                          band_size=band_size)
    for row in failing:
        if row.backend in probes:
            row.extra["layer0"] = probes[row.backend]["verdict"]
            row.extra["diagnosis"] += "; " + probe_text(probes[row.backend])


def run_logits(model: torch.nn.Module, prompts: list[torch.Tensor], backends: list[str], exact: str = "reference",
               options: SwapOptions = SwapOptions(), gate: PositionGate = PositionGate(), *,
               band_size: int = DEFAULT_BAND,
               baseline: str | None = None, on_length: Callable[[int, list[ComparisonRow]], None] | None = None,
               done: dict[int, list[ComparisonRow]] | None = None, progress=None) -> CheckResult:
    """Compare every position's next-token distribution for each prompt [1, N] in `prompts` (one per length),
    judged by `gate` (module docstring).

    `done` maps lengths to rows already computed (a resumed run); those lengths are skipped.
    `on_length` is called after each newly computed length (per-item records); `progress` is updated once a
    forward (2 + band_size + the other backends a length).
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
                                   seconds, tensors, progress)
        rows += length_rows
        if on_length is not None:
            on_length(tokens, length_rows)
    facts = {"lengths": [p.shape[1] for p in prompts], "gate": gate.describe(), "seconds": seconds,
             "dense_threshold": options.dense_threshold, "exact": exact, "baseline": baseline, "band_size": band_size}
    return CheckResult(rows, overall(rows), facts, tensors)
