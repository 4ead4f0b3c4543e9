"""`glmcheck selftest`: the accuracy suite on the real kernels, and (--mutants) on planted faults
(`glmcheck.evaluate.selftest_kernels`); with --model / --checkpoint the verdict rates, with --power the power curves
(`glmcheck.evaluate.selftest_rates`)."""

from __future__ import annotations

import argparse
import sys

from glmcheck.commands.model_options import add_kv_cache_option
from glmcheck.evaluate.selftest_rates import RATES_DEFAULTS
from glmcheck.selftest.mutants import mutant_names

RATE_MODELS = ["ref-cpu", "ref-gpu", "ref-gpu-fp8", "tiny"]

# The rates run's own options: (flag, default, help). Given without --model / --checkpoint they would be
# ignored, so they are refused; the kernel suite's --mutants / --only / --exhaustive likewise with them.
RATES_OPTIONS = (("--seeds", RATES_DEFAULTS["seeds"], "seeds 0..N-1 of the rates run"),
                 ("--tokens", RATES_DEFAULTS["tokens"], "prompt length of the rates run"),
                 ("--checks", RATES_DEFAULTS["checks"],
                  "checks of the rates run (comma-separated: layer0, logits, drift, firsttoken)"),
                 ("--band", RATES_DEFAULTS["band"], "band size of the rates run"))


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
    add_kv_cache_option(p, "with --model / --checkpoint: fp8_e4m3 runs the rates over DSA's FP8 KV pool "
                           "(the band's FP8 form; flashmla_kv is not among the rows)")
    p.add_argument("--calls", default=None, choices=["prefill", "serving"],
                   help="with --model / --checkpoint: serving calls every backend as an engine's extend does (chunks, "
                        "a paged pool, packed requests, topk_length) and adds the shape-only faults")
    p.add_argument("--power", action="store_true",
                   help="with --model / --checkpoint: power curves instead of rates (detection against fault size, "
                        "per check and fault kind; checks layer0 and logits)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(handler=handle, precheck=precheck)


def precheck(ns: argparse.Namespace) -> None:
    """Options that do not apply to the run asked for (`glmcheck.cli` runs it before any heavy import)."""
    from glmcheck.evaluate.arguments import check_seed

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
        if ns.power and ns.calls == "serving":
            raise ValueError("--calls applies to the verdict rates, not to --power")
        return
    given = [flag for flag, _, _ in RATES_OPTIONS if getattr(ns, flag[2:]) is not None]
    given += ["--power"] if ns.power else []
    given += ["--kv-cache-dtype"] if ns.kv_cache_dtype is not None else []
    given += ["--calls"] if ns.calls is not None else []
    if given:
        raise ValueError(f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to the verdict-rates run "
                         f"only: add --model (one of {', '.join(RATE_MODELS)}) or --checkpoint PATH")


def handle(ns: argparse.Namespace) -> int:
    from glmcheck.evaluate.selftest_kernels import selftest_suite
    from glmcheck.evaluate.selftest_rates import power_curves, verdict_rates

    precheck(ns)
    if ns.model is None and ns.checkpoint is None:
        say = None if ns.quiet else (lambda name: print(f"selftest: running {name}", file=sys.stderr, flush=True))
        report = selftest_suite(mutants=ns.mutants, only=ns.only, seed=ns.seed, exhaustive=ns.exhaustive,
                                progress=say)
    else:
        # Options left out take the library's defaults (--power's own --checks among them).
        given = {flag[2:]: getattr(ns, flag[2:]) for flag, _, _ in RATES_OPTIONS if getattr(ns, flag[2:]) is not None}
        say = None if ns.quiet else (lambda line: print(f"selftest: {line}", file=sys.stderr, flush=True))
        if ns.power:
            report = power_curves(ns.model, ns.checkpoint, **given, progress=say)
        else:
            report = verdict_rates(ns.model, ns.checkpoint, **given, kv_cache_dtype=ns.kv_cache_dtype,
                                   calls=ns.calls or "prefill", progress=say)
    print(report.render())
    return report.exit_code
