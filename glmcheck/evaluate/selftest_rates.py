"""`verdict_rates` and `power_curves`: how often the model-level verdicts are wrong over seeds
(`glmcheck.selftest.rates`), and detection against fault size (`glmcheck.selftest.power`), each as a `Report`
whose render is the table `glmcheck selftest --model` (`--power`) prints.

Light module (no torch at import): the CLI reads the defaults here before any heavy import.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from glmcheck.backends import forms

if TYPE_CHECKING:
    from glmcheck.evaluate.report import Report

RATES_DEFAULTS = {"seeds": 20, "tokens": 64, "checks": "layer0,logits,drift", "band": 4}
POWER_DEFAULT_CHECKS = "layer0,logits"

Progress = Callable[[str], None]


def _model_run(model: str | None, checkpoint: str | None, seeds: int, tokens: int, checks: str | Sequence[str],
               band: int, known: Sequence[str], context: str = ""):
    """(checks, spec, config, device) of a rates or power run, each option checked (one line naming its flag)."""
    from glmcheck.evaluate.arguments import check_band, check_count
    from glmcheck.model.load import ModelSpec, config_of, resolve_device
    from glmcheck.model.memory import check_fits

    for value, option in ((seeds, "--seeds"), (tokens, "--tokens")):
        check_count(value, option)
    check_band(band, held_out=2)  # two band variants held out: the legitimate rows, the power runs' CPU base
    text = checks if isinstance(checks, str) else ",".join(checks)
    names = [c.strip() for c in text.split(",") if c.strip()]
    if not names or any(c not in known for c in names):
        raise ValueError(f"--checks must name some of {', '.join(known)}{context}, got {text!r}")
    if model is not None and checkpoint is not None:
        raise ValueError("give --model or --checkpoint, not both")
    if model is None and checkpoint is None:
        raise ValueError("give --model or --checkpoint")
    spec = ModelSpec(checkpoint=checkpoint) if checkpoint else ModelSpec(model)
    config = config_of(spec)
    if tokens > config.max_position_embeddings:
        raise ValueError(f"--tokens {tokens}: more than the model's {config.max_position_embeddings} positions")
    device = resolve_device(None)
    check_fits(config, tokens, device)
    return names, spec, config, device


def verdict_rates(model: str | None = None, checkpoint: str | None = None, *, seeds: int = RATES_DEFAULTS["seeds"],
                  tokens: int = RATES_DEFAULTS["tokens"], checks: str | Sequence[str] = RATES_DEFAULTS["checks"],
                  band: int = RATES_DEFAULTS["band"], kv_cache_dtype: str | None = None, calls: str = "prefill",
                  progress: Progress | None = None) -> Report:
    """False-alarm and detection rates of `checks` on `model` (a preset or trained model) or `checkpoint`, over
    seeds 0..`seeds`-1 at `tokens` tokens with a band of `band`; `kv_cache_dtype="fp8_e4m3"` runs every forward over
    the FP8 pool; `calls="serving"` calls every backend engine-shaped (chunks, a paged pool, packed requests,
    topk_length: `glmcheck.model.engine_shape`, the defaults) with the shape-only faults
    (`glmcheck.selftest.shape_faults`) in place of the late fault. ValueError naming the flag for a bad option or a run
    past the forward limit. Verdict FAIL when layer0 misses a planted fault or its false alarms exceed 5 % of its
    legitimate runs, else PASS; one row per (check, backend) tally."""
    import dataclasses

    import glmcheck.kernels  # noqa: F401  (the interpreter on a machine without CUDA)
    from glmcheck.checks.band import FAIL, PASS
    from glmcheck.checks.rows import layer0_bar
    from glmcheck.evaluate.arguments import check_forwards
    from glmcheck.evaluate.report import Report
    from glmcheck.model.engine_shape import engine_shape
    from glmcheck.selftest.rates import (
        CHECKS,
        FIRSTTOKEN_PROMPTS,
        FIRSTTOKEN_TOKENS,
        legitimate_backends,
        measure_rates,
        planted_faults,
        rates_table,
    )
    from glmcheck.selftest.shape_faults import SHAPE_FAULTS

    engine = engine_shape(calls, None, None, None)
    names, spec, config, device = _model_run(model, checkpoint, seeds, tokens, checks, band, CHECKS)
    prompts = FIRSTTOKEN_PROMPTS if "firsttoken" in names else 1  # forwards per seed and check, at most
    per_run = prompts * (2 + band + len(legitimate_backends(config.num_attention_heads, band))
                         + len(planted_faults(tokens)) + (len(SHAPE_FAULTS) - 1 if engine else 0))
    check_forwards(seeds * len(names) * per_run,
                   f"{seeds} seeds x {len(names)} checks x {per_run} forwards (--seeds, --checks, --band)")
    fp8 = "fp8_e4m3" if kv_cache_dtype == "fp8_e4m3" else None
    tallies = measure_rates(spec, range(seeds), tokens, names, band, device=device, progress=progress,
                            kv_cache_dtype=fp8, engine=engine)
    ok, alarms, runs, missed = layer0_bar([dataclasses.asdict(t) for t in tallies])
    head = (f"verdict rates on {checkpoint or model}, {tokens} tokens, seeds 0..{seeds - 1}, band of {band}"
            + (", KV cache fp8_e4m3 (the FP8 pool; the band's FP8 form)" if fp8 else "")
            + (", engine-shaped calls (--calls serving; shape-only faults added)" if engine else "")
            + (f"; firsttoken: {FIRSTTOKEN_PROMPTS} prompts of {min(tokens, FIRSTTOKEN_TOKENS)} tokens a seed"
               if "firsttoken" in names else ""))
    text = "\n".join([head, rates_table(tallies),
                      f"layer0 bar (false alarms <= 5 %, every fault caught): {'met' if ok else 'NOT met'}"])
    return Report("selftest-rates", PASS if ok else FAIL, [dataclasses.asdict(t) for t in tallies],
                  {"layer0_false_alarms": alarms, "layer0_legitimate_runs": runs, "layer0_missed": missed},
                  spec.describe(), {"seeds": seeds, "tokens": tokens, "checks": names, "band": band,
                                    "kv_cache_dtype": fp8, **({"calls": "serving"} if engine else {}),
                                    **forms.active().record(device.type)},
                  extra={"table": text})


def power_curves(model: str | None = None, checkpoint: str | None = None, *, seeds: int = RATES_DEFAULTS["seeds"],
                 tokens: int = RATES_DEFAULTS["tokens"], checks: str | Sequence[str] = POWER_DEFAULT_CHECKS,
                 band: int = RATES_DEFAULTS["band"], progress: Progress | None = None) -> Report:
    """Detection against fault size per check (layer0, logits) and fault family on `model` or `checkpoint`, over
    seeds 0..`seeds`-1 at `tokens` tokens with a band of `band`. ValueError naming the flag for a bad option. A
    measurement: verdict PASS; one row per (check, family, size)."""
    import dataclasses

    import glmcheck.kernels  # noqa: F401  (the interpreter on a machine without CUDA)
    from glmcheck.checks.band import PASS
    from glmcheck.evaluate.report import Report
    from glmcheck.selftest.power import POWER_CHECKS, default_base, measure_power, power_table

    names, spec, _, device = _model_run(model, checkpoint, seeds, tokens, checks, band, POWER_CHECKS, " with --power")
    points = measure_power(spec, range(seeds), tokens, names, band_size=band, device=device, progress=progress)
    base = default_base(device, band)
    head = (f"power curves on {checkpoint or model}, {tokens} tokens, seeds 0..{seeds - 1}, band of {band}; "
            f"faults wrap {base}")
    return Report("selftest-power", PASS, [dataclasses.asdict(p) for p in points], {"base": base}, spec.describe(),
                  {"seeds": seeds, "tokens": tokens, "checks": names, "band": band,
                   **forms.active().record(device.type)},
                  extra={"table": "\n".join([head, power_table(points)])})
