"""How often the model-level verdicts are wrong: false-alarm and detection rates over seeds.

For each seed the checks run with (a) legitimate variants: the kernel under test (per-token and
every legal union) and two band variants held out of the band (`band:N`, `band:N+1`: flash-style
kernels of other block sizes, orders or normalisers, `glmcheck.backends.band_kernels`), and (b) the
planted faults of `glmcheck.selftest.faults`. A legitimate row judged FAIL is a false alarm; a fault
judged PASS a miss. A row judged INCONCLUSIVE (a band that cannot judge) is neither: it is counted
and printed apart. Each rate comes with its 95 % Wilson interval and the worst margin (a row's
largest statistic / limit: legitimate rows should stay below 1, faults above).

What a seed varies: on a dummy preset the weights and the prompt (seeded random ids); on a
checkpoint (a trained model or a real GLM one) the weights are fixed and the seed picks
the prompts: windows of the trained models' corpus's held-out text at seeded offsets
(`glmcheck.data.heldout`). `firsttoken` judges FIRSTTOKEN_PROMPTS short windows a seed.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from glmcheck.backends.names import band_names
from glmcheck.backends.registry import backend_names, register_backend
from glmcheck.checks.band import DEFAULT_BAND, FAIL, INCONCLUSIVE, PASS, Gate
from glmcheck.checks.drift import run_drift
from glmcheck.checks.firsttoken import run_firsttoken
from glmcheck.checks.layer0 import run_layer0
from glmcheck.checks.logits import run_logits
from glmcheck.checks.runner import SwapOptions
from glmcheck.data.heldout import heldout_stream, natural_prompt
from glmcheck.data.model_prompts import reads_text
from glmcheck.data.model_tokenizer import model_tokenizer
from glmcheck.data.prompts import Prompt, seeded_prompt
from glmcheck.kernels.union import legal_groups
from glmcheck.model.engine_calls import EngineCalls
from glmcheck.model.engine_shape import EngineShape
from glmcheck.model.load import ModelSpec, load_model
from glmcheck.selftest.faults import FAULTS, STRUCTURAL_FAULTS, late_fault
from glmcheck.selftest.shape_faults import register_shape_faults

CHECKS = ("layer0", "logits", "drift", "firsttoken")
DEFAULT_CHECKS = ("layer0", "logits", "drift")
FIRSTTOKEN_PROMPTS = 4  # prompts a seed in the firsttoken check
FIRSTTOKEN_TOKENS = 64  # tokens of each (or the rates' --tokens when shorter)


@dataclass
class Tally:
    """Verdicts of one (check, backend) over the seeds."""

    check: str
    backend: str
    legitimate: bool
    fails: int = 0
    runs: int = 0
    margins: list[float] = field(default_factory=list)
    inconclusive: int = 0  # runs whose band could not judge this row (neither a false alarm nor a detection)

    @property
    def wrong(self) -> int:
        """False alarms of a legitimate row (FAIL), misses of a fault (PASS); INCONCLUSIVE is neither."""
        return self.fails if self.legitimate else self.runs - self.fails - self.inconclusive

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


def planted_faults(tokens: int) -> dict[str, tuple]:
    """The planted faults a rate measurement runs at prompts of `tokens`: the catalogue, the structural ones and the
    fault that starts at 3/4 of the prompt (`glmcheck.selftest.faults.late_fault`)."""
    name, fn, description = late_fault(tokens)
    return {**FAULTS, **STRUCTURAL_FAULTS, name: (fn, description)}


def register_faults(tokens: int = 64) -> list[str]:
    """Make the planted faults at prompts of `tokens` available by name (each once per process); their names."""
    known = set(backend_names())
    faults = planted_faults(tokens)
    for name, (fn, description) in faults.items():
        if name not in known:
            register_backend(name, fn, description, source="glmcheck.selftest.faults")
    return list(faults)


def legitimate_backends(heads: int, band_size: int) -> list[str]:
    """The kernel under test, its legal unions and two held-out band variants."""
    return (["triton_sparse_mla"] + [f"triton_sparse_mla:union{g}" for g in legal_groups(heads)]
            + band_names(band_size + 2)[band_size:])


def _backend_rows(check: str, rows) -> dict[str, tuple[str, float]]:
    """{backend: (verdict, margin)} of a check's judged rows against the exact reference
    (drift: FAIL if any layer fails, else INCONCLUSIVE if any layer is; the largest margin over layers)."""
    out: dict[str, tuple[str, float]] = {}
    for row in rows:
        if row.comparison.startswith("noise band:") or "(per-token)" in row.comparison or row.verdict == "-":
            continue
        verdict, margin = out.get(row.backend, (PASS, -math.inf))
        both = (verdict, row.verdict)
        out[row.backend] = (FAIL if FAIL in both else INCONCLUSIVE if INCONCLUSIVE in both else PASS,
                            max(margin, row.extra.get("margin", math.nan)))
    return out


def measure_rates(model: str | ModelSpec = "tiny", seeds: Sequence[int] = range(20), tokens: int = 64,
                  checks: Sequence[str] = DEFAULT_CHECKS, band_size: int = DEFAULT_BAND, gate: Gate = Gate(),
                  device: torch.device | str = "cpu",
                  progress: Callable[[str], None] | None = None, kv_cache_dtype: str | None = None,
                  engine: EngineShape | None = None, faults: Sequence[str] | None = None,
                  legitimate: Sequence[str] | None = None) -> list[Tally]:
    """Run `checks` over `seeds` with the legitimate variants and the planted faults (see module
    docstring) on `model` (a preset name or a ModelSpec); one Tally per (check, backend). `kv_cache_dtype`
    "fp8_e4m3" runs every check over the FP8 KV pool (its band the FP8 band: `band_kernels.fp8_band_variant`).
    `engine` calls every backend engine-shaped (`--calls serving`; each seed its own layout). `faults` names the
    planted faults to run (default: `planted_faults`; with `engine` the shape-only ones of
    `glmcheck.selftest.shape_faults` instead of the late fault, inert there: docs/reliability.md, "Engine-shaped
    calls"), `legitimate` the legitimate rows (default: `legitimate_backends`)."""
    fault_names = register_faults(tokens)
    if engine is not None:  # the late fault starts at row 3T/4 of a call: chunks shorter than that never reach it
        fault_names = [n for n in fault_names if n != late_fault(tokens)[0]] + register_shape_faults()
    if faults is not None:
        register_shape_faults()
        fault_names = list(faults)
    device = torch.device(device)
    base = model if isinstance(model, ModelSpec) else ModelSpec(preset=model)
    tallies: dict[tuple[str, str], Tally] = {}
    fixed: dict[bool, torch.nn.Module] = {}  # a checkpoint's models, loaded once (layer0_only -> model)
    stream = None
    for seed in seeds:
        spec = base if base.checkpoint else dataclasses.replace(base, seed=seed)
        options = SwapOptions(kv_cache_dtype=kv_cache_dtype, engine=None if engine is None else
                              EngineCalls(dataclasses.replace(engine, seed=seed)))
        for check in checks:
            layer0_only = check == "layer0"
            if base.checkpoint:
                if layer0_only not in fixed:
                    fixed[layer0_only] = load_model(spec, device, layer0_only=layer0_only)
                net = fixed[layer0_only]
            else:
                net = load_model(spec, device, layer0_only=layer0_only)
            heads = net.config.num_attention_heads
            legit = legitimate_backends(heads, band_size) if legitimate is None else list(legitimate)
            backends = legit + fault_names
            tokenizer = model_tokenizer(spec, net.config.vocab_size) if reads_text(base) or check == "firsttoken" \
                else None
            if reads_text(base) and stream is None:
                stream = heldout_stream(tokenizer)
            prompt = functools.partial(_prompt, tokenizer=tokenizer if reads_text(base) else None, stream=stream,
                                       vocab_size=net.config.vocab_size, device=device)
            if check == "layer0":
                result = run_layer0(net, prompt(tokens, seed), backends, options=options, gate=gate,
                                    band_size=band_size)
            elif check == "logits":
                result = run_logits(net, [prompt(tokens, seed)], backends, options=options, band_size=band_size)
            elif check == "drift":
                result = run_drift(net, prompt(tokens, seed), backends, options=options, gate=gate,
                                   band_size=band_size)
            else:
                length = min(tokens, FIRSTTOKEN_TOKENS)
                keys = [seed * FIRSTTOKEN_PROMPTS + j + 1_000_000 for j in range(FIRSTTOKEN_PROMPTS)]
                prompts = [Prompt(f"seed{seed}-{j}", "", "rates") for j in range(FIRSTTOKEN_PROMPTS)]
                encoded = {p.id: prompt(length, key)[0].tolist() for p, key in zip(prompts, keys)}
                result = run_firsttoken(net, tokenizer, prompts, backends, options=options,
                                        gate_ratio=gate.ratio, max_dlogprob=None, band_size=band_size,
                                        device=device, encoded=encoded)
            rows = _firsttoken_rows(result) if check == "firsttoken" else _backend_rows(check, result.rows)
            for name, (verdict, margin) in rows.items():
                tally = tallies.setdefault((check, name), Tally(check, name, name in legit))
                tally.runs += 1
                tally.fails += verdict == FAIL
                tally.inconclusive += verdict == INCONCLUSIVE
                tally.margins.append(margin)
            if progress is not None:
                progress(f"seed {seed} {check}: {result.verdict}")
            if not base.checkpoint:
                del net
    return list(tallies.values())


def _prompt(length: int, key: int, *, tokenizer, stream: list[int] | None, vocab_size: int,
            device: torch.device) -> torch.Tensor:
    """[1, length] int64 ids for `key`: a window of the held-out text when a tokenizer is given, else seeded ids."""
    if tokenizer is not None:
        return natural_prompt(tokenizer, length, key, device, stream=stream)
    return seeded_prompt(vocab_size, length, key, device)


def _firsttoken_rows(result) -> dict[str, tuple[str, float]]:
    """{backend: (verdict, margin)} of a firsttoken result's judged rows; margin = mean |dlogprob| /
    its limit (gate ratio x the band's largest mean), inf when a flip lies beyond the tie gap."""
    out = {}
    limit = result.facts.get("gate_ratio", 2.0) * result.facts["band_mean_dlogprob"]
    for row in result.summary_rows:
        if row["verdict"] == "-" or row["comparison"].startswith("noise band:"):
            continue
        margin = math.inf if row["wide_flips"] else (row["mean_dlogprob"] / limit if limit > 0 else
                                                     (math.inf if row["mean_dlogprob"] > 0 else 0.0))
        out[row["backend"]] = (row["verdict"], margin)
    return out


def rates_table(tallies: list[Tally]) -> str:
    """Markdown: one line per (check, backend), then per check the pooled false-alarm rate."""
    from glmcheck.records.tables import markdown_table

    lines = []
    for t in tallies:
        low, high = wilson(t.wrong, t.runs)
        what = "false alarms" if t.legitimate else "misses"
        lines.append([t.check, t.backend, "legitimate" if t.legitimate else "fault", f"{t.wrong}/{t.runs} {what}",
                      f"{t.inconclusive}/{t.runs}", f"[{low:.2f}, {high:.2f}]", _fmt_margin(t.worst_margin())])
    table = markdown_table(["check", "backend", "kind", "wrong verdicts", "inconclusive", "95% interval",
                            "worst margin"], lines)
    summary = []
    for check in dict.fromkeys(t.check for t in tallies):
        legit = [t for t in tallies if t.check == check and t.legitimate]
        faults = [t for t in tallies if t.check == check and not t.legitimate]
        alarms, runs = sum(t.fails for t in legit), sum(t.runs for t in legit)
        caught, planted = sum(t.fails for t in faults), sum(t.runs for t in faults)
        low, high = wilson(alarms, runs)
        unjudged = sum(t.inconclusive for t in legit), sum(t.inconclusive for t in faults)
        summary.append(f"{check}: false-alarm rate {alarms}/{runs} = {alarms / max(runs, 1):.1%} "
                       f"(95% up to {high:.1%}); detection rate {caught}/{planted} = {caught / max(planted, 1):.1%}; "
                       f"inconclusive (the band could not judge; neither) {unjudged[0]}/{runs} legitimate, "
                       f"{unjudged[1]}/{planted} faults")
    return table + "\n\n" + "\n".join(summary)


def _fmt_margin(value: float) -> str:
    if math.isnan(value):
        return "-"
    return "inf" if math.isinf(value) else f"{value:.3g}x"
