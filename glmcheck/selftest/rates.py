"""How often the model-level verdicts are wrong: false-alarm and detection rates over seeds.

For each seed (dummy weights and prompt) the layer0, logits and drift checks run with
(a) legitimate variants: the kernel under test (per-token and every legal union) and two band
variants held out of the band (`band:N`, `band:N+1`: flash-style kernels of other block sizes,
orders or normalisers, `glmcheck.backends.band_kernels`), and (b) the planted faults of
`glmcheck.selftest.faults`. A legitimate row judged FAIL is a false alarm; a fault judged PASS a
miss. Each rate comes with its 95 % Wilson interval and the worst margin (a row's largest
statistic / limit: legitimate rows should stay below 1, faults above).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from glmcheck.backends.registry import backend_names, register_backend
from glmcheck.checks.band import DEFAULT_BAND, FAIL, Gate, band_names
from glmcheck.checks.drift import run_drift
from glmcheck.checks.layer0 import run_layer0
from glmcheck.checks.logits import run_logits
from glmcheck.data.prompts import seeded_prompt
from glmcheck.kernels.union import legal_groups
from glmcheck.model.load import ModelSpec, load_model
from glmcheck.selftest.faults import FAULTS

CHECKS = ("layer0", "logits", "drift")


@dataclass
class Tally:
    """Verdicts of one (check, backend) over the seeds."""

    check: str
    backend: str
    legitimate: bool
    fails: int = 0
    runs: int = 0
    margins: list[float] = field(default_factory=list)

    @property
    def wrong(self) -> int:
        """False alarms of a legitimate row, misses of a fault."""
        return self.fails if self.legitimate else self.runs - self.fails

    def worst_margin(self) -> float:
        """Legitimate: the largest margin (closest to a false alarm); fault: the smallest."""
        finite = [m if math.isfinite(m) else math.inf for m in self.margins]
        if not finite:
            return math.nan
        return max(finite) if self.legitimate else min(finite)


def wilson(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson score interval of a rate successes / trials."""
    if trials == 0:
        return math.nan, math.nan
    p = successes / trials
    denom = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def register_faults() -> None:
    """Make the planted faults available by name (once per process)."""
    known = set(backend_names())
    for name, (fn, description) in FAULTS.items():
        if name not in known:
            register_backend(name, fn, description, source="glmcheck.selftest.faults")


def legitimate_backends(heads: int, band_size: int) -> list[str]:
    """The kernel under test, its legal unions and two held-out band variants."""
    return (["triton_sparse_mla"] + [f"triton_sparse_mla:union{g}" for g in legal_groups(heads)]
            + band_names(band_size + 2)[band_size:])


def _backend_rows(check: str, rows) -> dict[str, tuple[str, float]]:
    """{backend: (verdict, margin)} of a check's judged rows against the exact reference
    (drift: FAIL if any layer fails, the largest margin over layers)."""
    out: dict[str, tuple[str, float]] = {}
    for row in rows:
        if row.comparison.startswith("noise band:") or "(per-token)" in row.comparison or row.verdict == "-":
            continue
        verdict, margin = out.get(row.backend, ("PASS", -math.inf))
        out[row.backend] = (FAIL if FAIL in (verdict, row.verdict) else "PASS",
                            max(margin, row.extra.get("margin", math.nan)))
    return out


def measure_rates(preset: str = "tiny", seeds: Sequence[int] = range(20), tokens: int = 64,
                  checks: Sequence[str] = CHECKS, band_size: int = DEFAULT_BAND, gate: Gate = Gate(),
                  device: torch.device | str = "cpu",
                  progress: Callable[[str], None] | None = None) -> list[Tally]:
    """Run `checks` over `seeds` with the legitimate variants and the planted faults (see module
    docstring); one Tally per (check, backend)."""
    register_faults()
    device = torch.device(device)
    tallies: dict[tuple[str, str], Tally] = {}
    for seed in seeds:
        spec = ModelSpec(preset=preset, seed=seed)
        for check in checks:
            model = load_model(spec, device, layer0_only=check == "layer0")
            heads = model.config.num_attention_heads
            legit = legitimate_backends(heads, band_size)
            backends = legit + list(FAULTS)
            ids = seeded_prompt(model.config.vocab_size, tokens, seed, device)
            if check == "layer0":
                result = run_layer0(model, ids, backends, gate=gate, band_size=band_size)
            elif check == "logits":
                result = run_logits(model, [ids], backends, gate=gate, band_size=band_size)
            else:
                result = run_drift(model, ids, backends, gate=gate, band_size=band_size)
            for name, (verdict, margin) in _backend_rows(check, result.rows).items():
                tally = tallies.setdefault((check, name), Tally(check, name, name in legit))
                tally.runs += 1
                tally.fails += verdict == FAIL
                tally.margins.append(margin)
            if progress is not None:
                progress(f"seed {seed} {check}: {result.verdict}")
            del model
    return list(tallies.values())


def rates_table(tallies: list[Tally]) -> str:
    """Markdown: one line per (check, backend), then per check the pooled false-alarm rate."""
    from glmcheck.records.tables import markdown_table

    lines = []
    for t in tallies:
        low, high = wilson(t.wrong, t.runs)
        what = "false alarms" if t.legitimate else "misses"
        lines.append([t.check, t.backend, "legitimate" if t.legitimate else "fault", f"{t.wrong}/{t.runs} {what}",
                      f"[{low:.2f}, {high:.2f}]", _fmt_margin(t.worst_margin())])
    table = markdown_table(["check", "backend", "kind", "wrong verdicts", "95% interval", "worst margin"], lines)
    summary = []
    for check in dict.fromkeys(t.check for t in tallies):
        legit = [t for t in tallies if t.check == check and t.legitimate]
        faults = [t for t in tallies if t.check == check and not t.legitimate]
        alarms, runs = sum(t.fails for t in legit), sum(t.runs for t in legit)
        caught, planted = sum(t.fails for t in faults), sum(t.runs for t in faults)
        low, high = wilson(alarms, runs)
        summary.append(f"{check}: false-alarm rate {alarms}/{runs} = {alarms / max(runs, 1):.1%} "
                       f"(95% up to {high:.1%}); detection rate {caught}/{planted} = {caught / max(planted, 1):.1%}")
    return table + "\n\n" + "\n".join(summary)


def _fmt_margin(value: float) -> str:
    if math.isnan(value):
        return "-"
    return "inf" if math.isinf(value) else f"{value:.3g}x"
