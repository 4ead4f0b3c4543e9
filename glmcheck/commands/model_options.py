"""The options every model check (layer0, logits, firsttoken, drift) takes, and the checks of them that
need no model: both without importing torch, transformers or triton, so that bad usage is answered
in well under a second (`glmcheck.cli` runs a command's `precheck` before any heavy import).
`glmcheck.evaluate.setup.Setup` checks the rest (and `CheckOptions.check` these again, for callers of the library)."""

from __future__ import annotations

import argparse

from glmcheck.backends import forms
from glmcheck.checks.band import DEFAULT_BAND, SWEEP_BAND
from glmcheck.commands.output_format import add_format_option
from glmcheck.evaluate.arguments import check_out_dir
from glmcheck.model import engine_shape as shape
from glmcheck.model.names import model_names
from glmcheck.model.trained import DEFAULT_MODEL

BAND_COST = {  # what --band costs each command, in forwards
    "layer0": "a run is 3 + band + backends forwards",
    "sweep": "a run is 1 + band + backends long forwards, 2 over the first length",
    "drift": "a run is 2 + band + backends forwards",
    "logits": "2 + band + backends forwards a length",
    "firsttoken": "2 + band + backends forwards a prompt",
}
GATED = ("layer0", "drift", "firsttoken")  # the checks --gate-ratio applies to (logits and the sweep refuse it)


def add_model_options(parser: argparse.ArgumentParser, command: str = "") -> None:
    """--model/--checkpoint/--layers/--experts/--seed/--init/--device/--tp/backends/gates/output/--format. The
    models are described once, in `glmcheck --help`; options a check refuses are accepted (their refusal names
    them) but not listed in its --help."""
    hidden = argparse.SUPPRESS
    parser.add_argument("--model", default=DEFAULT_MODEL, choices=model_names(), metavar="MODEL",
                        help=f"trained model or preset (default {DEFAULT_MODEL}; `glmcheck --help` lists them)")
    parser.add_argument("--checkpoint", default=None, metavar="DIR",
                        help="local Hugging Face checkpoint directory (bf16 or FP8)")
    parser.add_argument("--layers", type=int, default=None, metavar="N", help="override the number of layers")
    parser.add_argument("--experts", type=int, default=None, metavar="N", help="override the number of routed experts")
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="weights and prompt seed")
    parser.add_argument("--init", default="sharp", choices=["hf", "sharp"], help="dummy weight scale (default sharp)")
    parser.add_argument("--device", default=None, metavar="DEV", help="cpu or cuda[:N] (default: cuda when present)")
    parser.add_argument("--tp", type=int, default=1, metavar="N",
                        help="tensor-parallel degree (divides the heads)")
    parser.add_argument("--backends", default=None, metavar="A,B",
                        help="the backends (default: every one that runs here)")
    parser.add_argument("--exact", default="fp32", choices=["fp32", "fp64"],
                        help="the exact reference (default fp32)")
    parser.add_argument("--baseline", default=None, metavar="NAME",
                        help="also compared with (default FlashMLA where it runs)")
    default_band = SWEEP_BAND if command == "sweep" else DEFAULT_BAND
    parser.add_argument("--band", type=int, default=None, metavar="N",
                        help=f"ideal variants in the noise band (default {default_band})")
    add_kv_cache_option(parser)
    parser.add_argument("--deterministic", action="store_true", help="batch-invariant kernels (union off)")
    add_form_options(parser)
    add_engine_options(parser)
    gated = command in GATED or not command
    parser.add_argument("--gate-ratio", type=float, default=2.0, metavar="R",
                        help="PASS when each statistic <= R x the band's max" if gated else hidden)
    parser.add_argument("--max-rel-l2", type=float, default=None, metavar="X",
                        help="a rel-L2 above it FAILS (only stricter)"
                        if command in ("layer0", "drift", "") else hidden)
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="record directory (default runs/<command>-<timestamp>)")
    parser.add_argument("--overwrite", action="store_true", help="replace the record in --out")
    parser.add_argument("--save-tensors", action="store_true", help="also write tensors.safetensors")
    parser.add_argument("--quiet", action="store_true",
                        help="no progress bars or warnings (the record keeps them)")
    add_weight_options(parser)
    parser.epilog = " ".join(x for x in (parser.epilog, MORE_OPTIONS) if x)
    add_format_option(parser)
    parser.add_argument("--profile", action="store_true",
                        help="where the wall time went (stderr)")


MORE_OPTIONS = ("Also (docs/checks.md, \"Options\"): --band-impl and --reference-impl, the band's and the exact "
                "reference's forms; --chunk, --pool-rows and --requests with --calls serving.")


def add_weight_options(parser: argparse.ArgumentParser) -> None:
    """--weights and --rehearse-rank (docs/models.md, "FP8 weights resident"; docs/multigpu.md, "Rank rehearsal")."""
    parser.add_argument("--weights", default="auto", choices=["auto", "bf16", "fp8"],
                        help="FP8 checkpoint weights resident (fp8) or dequantised at load (bf16); auto: fp8 where "
                             "bf16 won't fit")
    parser.add_argument("--rehearse-rank", type=int, default=None, metavar="R",
                        help="rank R of --tp alone: memory and time, no verdict")


def add_form_options(parser: argparse.ArgumentParser) -> None:
    """--band-impl/--reference-impl: the band's and the fp32 reference's forms (`glmcheck.backends.forms`), recorded
    with the run; the environment's GLMCHECK_BAND_IMPL / GLMCHECK_REFERENCE_IMPL are their defaults. Named in the
    --help's epilog (MORE_OPTIONS), not listed one by one."""
    parser.add_argument("--band-impl", default=None, choices=forms.BAND_IMPLS, help=argparse.SUPPRESS)
    parser.add_argument("--reference-impl", default=None, choices=forms.REFERENCE_IMPLS, help=argparse.SUPPRESS)


def add_kv_cache_option(parser: argparse.ArgumentParser, text: str = "bf16 or fp8_e4m3 (DSA's FP8 pool)") -> None:
    """--kv-cache-dtype: bf16, or fp8_e4m3 (DSA's FP8 KV pool); None when not given. Every command that takes it
    (the checks, plan, selftest, bench, serve) adds it here, each with its own help `text`."""
    parser.add_argument("--kv-cache-dtype", default=None, choices=["bf16", "fp8_e4m3"], metavar="DTYPE", help=text)


def add_engine_options(parser: argparse.ArgumentParser, *, chunk: bool = True) -> None:
    """--calls/--chunk/--pool-rows/--requests: how each backend is called (docs/checks.md, "Engine-shaped calls");
    the last three are named in the --help's epilog (MORE_OPTIONS). Without `chunk` no --chunk (`glmcheck plan`,
    whose activation estimate bounds the one-shot call, larger than a chunk's)."""
    parser.add_argument("--calls", default="prefill", choices=shape.CALLS,
                        help="prefill (default) or serving: an engine's chunked extend over a paged pool")
    for name in ("--chunk", "--pool-rows", "--requests")[0 if chunk else 1:]:
        parser.add_argument(name, type=int, default=None, help=argparse.SUPPRESS)


def check_model_usage(ns: argparse.Namespace, *, resumable: bool = False) -> None:
    """The shared options' checks that need no model (ValueError naming the option): those of
    `CheckOptions.check` (seed, gate ratio, cap, depth and experts, an empty --backends) and --out
    (`check_out_dir`: another run's record is refused unless --overwrite; a `resumable` command resumes its own)."""
    from glmcheck.evaluate.options import CheckOptions

    CheckOptions.from_namespace(ns).check()
    check_out_dir(ns.out, overwrite=getattr(ns, "overwrite", False), resumable=resumable)


def refuse_band_gate_options(ns: argparse.Namespace, check: str) -> None:
    """ValueError naming --gate-ratio / --max-rel-l2 when given to `check` (logits, sweep), which judges every
    position by the all-position gate instead of a ratio to the band's max."""
    given = [flag for flag, value in (("--gate-ratio", ns.gate_ratio != 2.0), ("--max-rel-l2", ns.max_rel_l2))
             if value]
    if given:
        raise ValueError(f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to layer0, drift and "
                         f"firsttoken; {check} judges every position by the all-position gate, whose limits are "
                         f"measured (docs/reliability.md, \"All-position logits and the one-forward sweep\")")
