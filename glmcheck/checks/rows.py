"""Comparison rows shared by the checks: distances of one backend's output from the exact
reference (and from the baseline kernel), judged beside the noise band (`glmcheck.checks.band`).
Informational rows carry verdict "-".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import torch

from glmcheck.backends.errors import KernelFault
from glmcheck.checks import metrics
from glmcheck.checks.band import (  # the verdict words, one place
    FAIL,
    INCONCLUSIVE,
    INFO,
    PASS,
    BadReference,
    Band,
    Gate,
)

GATED_STATS = ("rel_l2", "token_max_rel_l2", "scale_bias", "scale_bias_se", "temperature_bias",
               "temperature_bias_se")


@dataclass
class ComparisonRow:
    """One row of a comparison table (all metrics in float64, where the tensors are). `rel_l2` is the distance
    the gate judges (to the exact reference); `extra` holds the further statistics (layer0's
    token_max_rel_l2, scale_bias and temperature_bias), the distance to the baseline kernel and
    check-specific fields.
    `measured` is False for a row with nothing to compare (a backend never called): its numbers are
    missing, not a NaN the backend produced."""

    comparison: str
    backend: str
    against: str
    compared_on: str
    cosine: float
    rel_l2: float
    max_abs: float
    verdict: str = INFO
    tokens: int | None = None
    note: str = ""
    extra: dict = field(default_factory=dict)
    measured: bool = True

    def as_dict(self) -> dict:
        """The record row: every field and extra statistic, and `nonfinite`, the comma-separated names
        of the measured statistics that came out NaN (a record's float columns cannot tell a NaN the
        backend produced from a cell that does not apply; the tables print `nan` for the first, `-`
        for the second)."""
        row = asdict(self)
        measured = row.pop("measured")
        row.update(row.pop("extra"))
        row["nonfinite"] = ",".join(k for k, v in row.items() if measured and isinstance(v, float) and math.isnan(v))
        return row

    def stats(self) -> dict[str, float]:
        """The statistics a gate may judge: rel_l2 and those of GATED_STATS in extra."""
        return {"rel_l2": self.rel_l2, **{k: self.extra[k] for k in GATED_STATS[1:] if k in self.extra}}


def compare(comparison: str, backend: str, against: str, compared_on: str,
            actual: torch.Tensor, expected: torch.Tensor, *, per_token: bool = False,
            temperature: torch.Tensor | None = None, finite: metrics.FiniteCache | None = None,
            **kw) -> ComparisonRow:
    """A row with cosine, rel-L2 and max-abs of actual vs expected (verdict set later); with
    `per_token` (tensors [T, ...]) also token_max_rel_l2 and scale_bias (+ its standard error), and
    with `temperature` (expected's derivative in the softmax scale's relative change, same shape)
    temperature_bias (+ its standard error): the relative softmax-scale error the difference shows.
    One pass over the pair where the tensors are (`metrics.pair_statistics`); `finite` remembers which
    tensors were found finite across a check's comparisons."""
    stats = metrics.pair_statistics(actual, expected, per_token=per_token, direction=temperature if per_token else None,
                                    finite=finite)
    row = ComparisonRow(comparison, backend, against, compared_on, stats.pop("cosine"), stats.pop("rel_l2"),
                        stats.pop("max_abs"), **kw)
    row.extra |= stats
    return row


def cross_check_note(options) -> str:
    """Why an hf row (transformers' own attention, `options` a SwapOptions) is shown but not judged."""
    if options.kv_cache_dtype:
        return f"not comparable under FP8: transformers' attention never sees the {options.kv_cache_dtype} KV"
    return "cross-check of the reference (transformers' bf16 attention), not gated"


def judge_row(row: ComparisonRow, gate: Gate, band: Band) -> None:
    """Set the row's verdict beside the band (`Gate.verdict`: INCONCLUSIVE where the band cannot judge),
    its margin (largest statistic / limit) and, unless it passes, why (appended to its note)."""
    row.verdict, why = gate.verdict(row.stats(), band)
    row.extra["margin"] = gate.margin(row.stats(), band)
    row.note = "; ".join(x for x in (row.note, why) if x)


def not_called_row(backend: str, against: str, compared_on: str, expected: int, seen: int, **kw) -> ComparisonRow:
    """A FAIL row for a backend that ran fewer kernel calls than expected."""
    return ComparisonRow(f"{backend} vs {against}", backend, against, compared_on, math.nan, math.nan, math.nan,
                         FAIL, note=f"expected {expected} kernel calls, saw {seen}", measured=False, **kw)


def fault_row(fault: KernelFault, against: str, compared_on: str, **kw) -> ComparisonRow:
    """A FAIL row for a backend that raised or broke the output contract while it ran (`KernelFault`)."""
    return ComparisonRow(f"{fault.backend} vs {against}", fault.backend, against, compared_on, math.nan, math.nan,
                         math.nan, FAIL, note=fault.reason, measured=False, **kw)


def unmeasured_row(name: str, faults: dict[str, KernelFault], run, against: str, compared_on: str, layers: int,
                   tp: int, **kw) -> ComparisonRow | None:
    """The FAIL row of backend `name` when it left nothing to compare: it raised or broke the output contract
    (`faults[name]`, `fault_row`), or its forward `run` (a `BackendRun`) made fewer kernel calls than `layers` layers
    at `tp` call for (`not_called_row`). None when `run` can be compared."""
    if name in faults:
        return fault_row(faults[name], against, compared_on, **kw)
    expected, seen = run.missing_calls(layers, tp)
    if expected:
        return not_called_row(name, against, compared_on, expected, seen, **kw)
    return None


def overall(rows: list[ComparisonRow]) -> str:
    """FAIL if any row failed or none was judged (a check that expected rows and got none), else
    INCONCLUSIVE if any row's band could not judge it, else PASS."""
    return overall_of([r.verdict for r in rows])


def overall_of(verdicts: list[str]) -> str:
    """The verdict of a check from its rows' verdicts (see `overall`)."""
    judged = [v for v in verdicts if v != INFO]
    if not judged or FAIL in judged:
        return FAIL
    return INCONCLUSIVE if INCONCLUSIVE in judged else PASS


FALSE_ALARM_BAR = 0.05  # layer0's false alarms allowed, as a share of its legitimate runs


def layer0_bar(tallies: Sequence[dict]) -> tuple[bool, int, int, int]:
    """(met, false alarms, legitimate runs, faults not caught) of layer0's bar over the verdict-rates run's tallies
    (`glmcheck.selftest.rates.Tally` as dicts, a record's rows): false alarms <= FALSE_ALARM_BAR of the legitimate runs
    and every fault caught (a miss or an INCONCLUSIVE run is not caught); met when layer0 did not run."""
    layer0 = [t for t in tallies if t["check"] == "layer0"]
    alarms = sum(int(t["fails"]) for t in layer0 if t["legitimate"])
    runs = sum(int(t["runs"]) for t in layer0 if t["legitimate"])
    missed = sum(int(t["runs"]) - int(t["fails"]) for t in layer0 if not t["legitimate"])
    return not layer0 or (missed == 0 and alarms <= FALSE_ALARM_BAR * runs), alarms, runs, missed


def first_nonfinite_parameter(model: torch.nn.Module) -> str | None:
    """The name of the model's first parameter or buffer that holds NaN/Inf (None: all finite)."""
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        if tensor.is_floating_point() and tensor.numel() and \
                not bool(torch.isfinite(tensor.float() if tensor.element_size() == 1 else tensor).all()):
            return name
    return None


def require_finite(model: torch.nn.Module, tensor: torch.Tensor, what: str, backend: str, exact: str) -> None:
    """BadReference unless `tensor`, the `what` (e.g. "logits at 96 tokens") of the exact reference or of a band
    sample `backend`, is finite: a reference that is NaN is bad weights or a bad prompt, never a kernel FAIL."""
    if bool(torch.isfinite(tensor).all()):
        return
    if backend == exact:
        bad = first_nonfinite_parameter(model)
        cause = f"weight {bad} holds NaN/Inf" if bad else \
            "every weight is finite: the prompt drives the model out of range"
        raise BadReference(f"the exact reference ({exact}) gives NaN/Inf {what}: bad input ({cause}), not a kernel "
                           f"fault")
    raise BadReference(f"noise band sample {backend} gives NaN/Inf {what} while the exact reference ({exact}) is "
                       f"finite: bad input (weights or prompt beyond bf16's range), not a kernel fault")
