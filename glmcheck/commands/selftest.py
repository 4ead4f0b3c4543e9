"""`glmcheck selftest`: the accuracy suite on the real kernels, and (--mutants) on planted faults."""

from __future__ import annotations

import argparse
import math
import sys

from glmcheck.selftest.mutants import mutant_names

MUTANT_HEADERS = ["mutant", "breaks", "detected", "caught by", "margin"]


RATE_MODELS = ["ref-cpu", "ref-gpu", "ref-gpu-fp8", "tiny"]

# The rates run's own options: (flag, default, help). Given without --model / --checkpoint they would be
# ignored, so they are refused; the kernel suite's --mutants / --only / --exhaustive likewise with them.
RATES_OPTIONS = (("--seeds", 20, "seeds 0..N-1 of the rates run"),
                 ("--tokens", 64, "prompt length of the rates run"),
                 ("--checks", "layer0,logits,drift",
                  "checks of the rates run (comma-separated: layer0, logits, drift, firsttoken)"),
                 ("--band", 4, "band size of the rates run"))


def add_parser(sub) -> None:
    p = sub.add_parser("selftest", help="prove the accuracy suite catches planted kernel faults",
                       description="Run the small CPU-sized accuracy suite on the real kernels (all checks "
                                   "must pass). With --mutants, also run it on mutated copies of the kernels, "
                                   "each with one planted fault, and report which check caught each one.")
    p.add_argument("--mutants", action="store_true", help="also run every catalogued mutant")
    p.add_argument("--only", default=None, choices=mutant_names(), metavar="NAME",
                   help=f"run only this mutant (implies --mutants); one of: {', '.join(mutant_names())}")
    p.add_argument("--exhaustive", action="store_true",
                   help="run every check on every mutant (default: stop at the first check that fails)")
    p.add_argument("--seed", type=int, default=0, help="input seed of the suite")
    p.add_argument("--model", default=None, choices=RATE_MODELS,
                   help="instead of the kernel suite: the model-level verdicts' false-alarm and detection rates "
                        "on this model (legitimate variants and planted faults, over --seeds seeds; on a dummy "
                        "preset a seed varies weights and prompt, on a trained model the held-out text prompt)")
    p.add_argument("--checkpoint", default=None,
                   help="the rates on a local checkpoint instead (a seed varies the held-out text prompt)")
    for flag, default, help_text in RATES_OPTIONS:
        p.add_argument(flag, type=str if flag == "--checks" else int, default=None,
                       help=f"{help_text} (default {default}; with --model or --checkpoint only)")
    p.add_argument("--kv-cache-dtype", default=None, choices=["bf16", "fp8_e4m3"],
                   help="with --model / --checkpoint: fp8_e4m3 runs the rates over DSA's FP8 KV pool (the band's "
                        "FP8 form; flashmla_kv is not among the rows)")
    p.add_argument("--power", action="store_true",
                   help="with --model / --checkpoint: power curves instead of rates (detection against fault size, "
                        "per check and fault kind; checks layer0 and logits)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(handler=handle, precheck=precheck)


def precheck(ns: argparse.Namespace) -> None:
    """Options that do not apply to the run asked for (`glmcheck.cli` runs it before any heavy import)."""
    from glmcheck.arguments import check_seed

    check_seed(ns.seed)
    rates = ns.model is not None or ns.checkpoint is not None
    if rates:
        suite = [flag for flag, given in (("--mutants", ns.mutants), ("--only", ns.only is not None),
                                          ("--exhaustive", ns.exhaustive)) if given]
        if suite:
            raise ValueError(f"{', '.join(suite)} {'applies' if len(suite) == 1 else 'apply'} to the kernel suite; "
                             f"--model / --checkpoint run the verdict rates instead")
        if ns.power and ns.kv_cache_dtype == "fp8_e4m3":
            raise ValueError("--kv-cache-dtype applies to the verdict rates, not to --power")
        return
    given = [flag for flag, _, _ in RATES_OPTIONS if getattr(ns, flag[2:]) is not None]
    given += ["--power"] if ns.power else []
    given += ["--kv-cache-dtype"] if ns.kv_cache_dtype is not None else []
    if given:
        raise ValueError(f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to the verdict-rates run "
                         f"only: add --model (one of {', '.join(RATE_MODELS)}) or --checkpoint PATH")


def _rates_defaults(ns: argparse.Namespace) -> None:
    for flag, default, _ in RATES_OPTIONS:
        if getattr(ns, flag[2:]) is None:
            setattr(ns, flag[2:], default)


def fmt_margin(value: float | None) -> str:
    """A gate margin: measured / threshold, 'inf' for NaN output or an exact-check failure."""
    if value is None:
        return "-"
    if value == 0:
        return "0"
    return "inf" if math.isinf(value) else f"{value:.3g}x"


def fmt_measured(value: float, threshold: float, crashed: bool = False) -> str:
    """The measured value: scientific for gated values, an integer count for exact checks; `-` when
    the implementation raised (nothing measured), `nan` for a NaN it produced."""
    if crashed:
        return "-"
    if math.isnan(value):
        return "nan"
    return f"{int(value)}" if threshold == 0 else f"{value:.3e}"


def baseline_table(report) -> str:
    """Markdown table of the baseline checks."""
    from glmcheck.records.tables import markdown_table

    rows = [(o.name, fmt_measured(o.measured, o.threshold, o.crashed), f"{o.threshold:g}" if o.threshold else "exact",
             fmt_margin(o.margin),
             "PASS" if o.passed else "FAIL", o.detail) for o in report.baseline]
    return markdown_table(["check", "measured", "threshold", "margin", "verdict", "detail"], rows)


def mutant_table(report, exhaustive: bool) -> str:
    """Markdown table, one row per mutant (with the failed-check count when exhaustive)."""
    from glmcheck.records.tables import markdown_table

    headers = MUTANT_HEADERS + (["checks failed"] if exhaustive else [])
    rows = []
    for r in report.mutants:
        row = [r.mutant.name, r.mutant.breaks, "yes" if r.detected else "NO", r.caught_by or "-",
               fmt_margin(r.margin)]
        if exhaustive:
            row.append(f"{sum(not o.passed for o in r.outcomes)}/{len(r.outcomes)}")
        rows.append(row)
    return markdown_table(headers, rows)


def handle(ns: argparse.Namespace) -> int:
    precheck(ns)
    import glmcheck.kernels  # noqa: F401  (interpreter on CPU-only machines)
    if ns.model is not None or ns.checkpoint is not None:
        if ns.power and ns.checks is None:
            ns.checks = "layer0,logits"
        _rates_defaults(ns)
        return handle_power(ns) if ns.power else handle_rates(ns)
    from glmcheck.selftest.mutants import CATALOGUE, find_mutant
    from glmcheck.selftest.runner import run_selftest

    mutants = [find_mutant(ns.only)] if ns.only else list(CATALOGUE) if ns.mutants else []
    say = None if ns.quiet else (lambda name: print(f"selftest: running {name}", file=sys.stderr, flush=True))
    report = run_selftest(mutants, seed=ns.seed, exhaustive=ns.exhaustive, progress=say)
    print(baseline_table(report))
    print("margin = measured / threshold (below 1 passes); inf = NaN/Inf output or an exact check failed")
    print(f"baseline: {'PASS' if report.baseline_passed else 'FAIL'} ({report.baseline_seconds:.1f} s)")
    if mutants:
        print()
        print(mutant_table(report, ns.exhaustive))
        print(f"score: {report.detected}/{report.total} ({100 * report.score:.0f}%)")
        print(f"mutant loop: {report.mutant_seconds:.1f} s")
        if not report.baseline_passed:
            print("note: the baseline failed, so mutant detections prove nothing")
    return 0 if report.passed else 1


def _model_run(ns: argparse.Namespace, known: tuple[str, ...], context: str = ""):
    """(checks, spec, config, device) of a rates or power run, each option checked (one line naming it)."""
    from glmcheck.arguments import check_band, check_count
    from glmcheck.model.load import ModelSpec, config_of, resolve_device
    from glmcheck.model.memory import check_fits

    for value, option in ((ns.seeds, "--seeds"), (ns.tokens, "--tokens")):
        check_count(value, option)
    check_band(ns.band, held_out=2)  # two band variants held out: the legitimate rows, the power runs' CPU base
    checks = [c.strip() for c in ns.checks.split(",") if c.strip()]
    if not checks or any(c not in known for c in checks):
        raise ValueError(f"--checks must name some of {', '.join(known)}{context}, got {ns.checks!r}")
    if ns.model is not None and ns.checkpoint is not None:
        raise ValueError("give --model or --checkpoint, not both")
    spec = ModelSpec(checkpoint=ns.checkpoint) if ns.checkpoint else ModelSpec(ns.model)
    config = config_of(spec)
    if ns.tokens > config.max_position_embeddings:
        raise ValueError(f"--tokens {ns.tokens}: more than the model's {config.max_position_embeddings} positions")
    device = resolve_device(None)
    check_fits(config, ns.tokens, device)
    return checks, spec, config, device


def handle_rates(ns: argparse.Namespace) -> int:
    """`--model`: false-alarm and detection rates; exit 1 when layer0 misses a planted fault or its
    false-alarm rate exceeds 5 %."""
    from glmcheck.arguments import check_forwards
    from glmcheck.selftest.rates import (
        CHECKS,
        FIRSTTOKEN_PROMPTS,
        FIRSTTOKEN_TOKENS,
        legitimate_backends,
        measure_rates,
        planted_faults,
        rates_table,
    )

    checks, spec, config, device = _model_run(ns, CHECKS)
    prompts = FIRSTTOKEN_PROMPTS if "firsttoken" in checks else 1  # forwards per seed and check, at most
    per_run = prompts * (2 + ns.band + len(legitimate_backends(config.num_attention_heads, ns.band)) 
               + len(planted_faults(ns.tokens)))
    check_forwards(ns.seeds * len(checks) * per_run,
                   f"{ns.seeds} seeds x {len(checks)} checks x {per_run} forwards (--seeds, --checks, --band)")
    say = None if ns.quiet else (lambda line: print(f"selftest: {line}", file=sys.stderr, flush=True))
    fp8 = "fp8_e4m3" if ns.kv_cache_dtype == "fp8_e4m3" else None
    tallies = measure_rates(spec, range(ns.seeds), ns.tokens, checks, ns.band, device=device, progress=say,
                            kv_cache_dtype=fp8)
    name = ns.checkpoint or ns.model
    print(f"verdict rates on {name}, {ns.tokens} tokens, seeds 0..{ns.seeds - 1}, band of {ns.band}"
          + (", KV cache fp8_e4m3 (the FP8 pool; the band's FP8 form)" if fp8 else "")
          + (f"; firsttoken: {FIRSTTOKEN_PROMPTS} prompts of {min(ns.tokens, FIRSTTOKEN_TOKENS)} tokens a seed"
             if "firsttoken" in checks else ""))
    print(rates_table(tallies))
    layer0 = [t for t in tallies if t.check == "layer0"]
    legit = [t for t in layer0 if t.legitimate]
    alarms, runs = sum(t.fails for t in legit), sum(t.runs for t in legit)
    missed = sum(t.runs - t.fails for t in layer0 if not t.legitimate)  # a miss or INCONCLUSIVE: not caught
    ok = not layer0 or (missed == 0 and alarms <= 0.05 * runs)
    print(f"layer0 bar (false alarms <= 5 %, every fault caught): {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


def handle_power(ns: argparse.Namespace) -> int:
    """`--power`: detection against fault size per check and fault kind (`glmcheck.selftest.power`); exit 0."""
    from glmcheck.selftest.power import POWER_CHECKS, default_base, measure_power, power_table

    checks, spec, _, device = _model_run(ns, POWER_CHECKS, " with --power")
    say = None if ns.quiet else (lambda line: print(f"selftest: {line}", file=sys.stderr, flush=True))
    points = measure_power(spec, range(ns.seeds), ns.tokens, checks, band_size=ns.band, device=device, progress=say)
    print(f"power curves on {ns.checkpoint or ns.model}, {ns.tokens} tokens, seeds 0..{ns.seeds - 1}, band of "
          f"{ns.band}; faults wrap {default_base(device, ns.band)}")
    print(power_table(points))
    return 0
