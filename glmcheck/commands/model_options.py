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
                        help=f"trained model or dummy preset (default {DEFAULT_MODEL}; `glmcheck --help` lists them)")
    parser.add_argument("--checkpoint", default=None, metavar="DIR",
                        help="local Hugging Face checkpoint directory (bf16 or FP8)")
    parser.add_argument("--layers", type=int, default=None, metavar="N", help="override the number of layers")
    parser.add_argument("--experts", type=int, default=None, metavar="N", help="override the number of routed experts")
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="weights and prompt seed")
    parser.add_argument("--init", default="sharp", choices=["hf", "sharp"], help="dummy weight scale (default sharp)")
    parser.add_argument("--device", default=None, help="cpu or cuda[:N] (default: cuda when present)")
    parser.add_argument("--tp", type=int, default=1, metavar="N",
                        help="tensor-parallel degree emulated (divides the heads)")
    parser.add_argument("--backends", default=None, metavar="A,B",
                        help="comma-separated backends (default: every backend available here)")
    parser.add_argument("--exact", default="fp32", choices=["fp32", "fp64"],
                        help="the exact reference every row is judged against (default fp32)")
    parser.add_argument("--baseline", default=None,
                        help="kernel whose distance every row also shows (default flashmla_sparse where it runs; "
                             "none: none)")
    default_band = SWEEP_BAND if command == "sweep" else DEFAULT_BAND
    parser.add_argument("--band", type=int, default=None, metavar="N",
                        help=f"legitimate variants in the noise band (default {default_band}; "
                             f"{BAND_COST.get(command, 'each costs one forward')})")
    parser.add_argument("--kv-cache-dtype", default=None, choices=["bf16", "fp8_e4m3"],
                        help="emulate an FP8 KV cache feeding the absorbed backends")
    parser.add_argument("--deterministic", action="store_true", help="batch-invariant kernels (union off)")
    add_form_options(parser)
    add_engine_options(parser)
    gated = command in GATED or not command
    parser.add_argument("--gate-ratio", type=float, default=2.0, metavar="R",
                        help="PASS when each judged statistic <= ratio x the band's max" if gated else hidden)
    parser.add_argument("--max-rel-l2", type=float, default=None, metavar="X",
                        help="absolute rel-L2 cap: a row above it FAILS even within the band (only stricter)"
                        if command in ("layer0", "drift", "") else hidden)
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="record directory (default runs/<command>-<timestamp>; another run's record is refused "
                             "unless --overwrite)")
    parser.add_argument("--overwrite", action="store_true", help="replace the record in --out")
    parser.add_argument("--save-tensors", action="store_true", help="also write tensors.safetensors")
    parser.add_argument("--quiet", action="store_true",
                        help="no progress bars or warnings (the record keeps the warnings)")
    add_weight_options(parser)
    add_format_option(parser)
    parser.add_argument("--profile", action="store_true",
                        help="where the wall time went, on stderr at the end (GLMCHECK_PROFILE=1: any command)")


WEIGHTS_HELP = ("how block-FP8 weights are held: fp8 keeps each FP8 linear's e4m3 codes and 128 x 128 block scales "
                "resident and dequantises one matrix (or one expert stack) at a time just before use, bit for bit "
                "the bf16 values (every record equals bf16's); bf16 dequantises an FP8 checkpoint at load. auto "
                "(default): an FP8 checkpoint stays fp8 where its bf16 weights and the activations of the longest "
                "prompt would not fit this device (a torchrun rank or rehearsal: its shard; `glmcheck plan` counts "
                "both), bf16 otherwise; presets and bf16 checkpoints bf16. fp8 on a preset quantises its dummy "
                "weights in 128 x 128 blocks; on a bf16 checkpoint it is refused")


def add_weight_options(parser: argparse.ArgumentParser) -> None:
    """--weights and --rehearse-rank (docs/models.md, "FP8 weights resident"; docs/multigpu.md, "Rank rehearsal")."""
    parser.add_argument("--weights", default="auto", choices=["auto", "bf16", "fp8"], help=WEIGHTS_HELP)
    parser.add_argument("--rehearse-rank", type=int, default=None, metavar="R",
                        help="rehearse rank R of --tp alone on this device: its shard only, the all-reduces replaced "
                             "by the identity, the check's forwards end to end; reports peak memory (allocator and "
                             "device) and time per forward against `glmcheck plan`. The numbers mean nothing: no "
                             "verdict, exit 4")


def add_form_options(parser: argparse.ArgumentParser) -> None:
    """--band-impl/--reference-impl: the band's and the fp32 reference's forms (`glmcheck.backends.forms`), recorded
    with the run; the environment's GLMCHECK_BAND_IMPL / GLMCHECK_REFERENCE_IMPL are their defaults."""
    parser.add_argument("--band-impl", default=None, choices=forms.BAND_IMPLS,
                        help="the band's ideal kernels: torch (block loop) or triton (one pass per token); auto: "
                             "triton on a GPU, torch on the CPU (default $GLMCHECK_BAND_IMPL, else auto)")
    parser.add_argument("--reference-impl", default=None, choices=forms.REFERENCE_IMPLS,
                        help="the fp32 exact reference: torch (gather, softmax) or triton (tensor cores) (default "
                             "$GLMCHECK_REFERENCE_IMPL, else torch)")


def add_engine_options(parser: argparse.ArgumentParser) -> None:
    """--calls/--chunk/--pool-rows/--requests: how each backend is called (docs/checks.md, "Engine-shaped calls")."""
    parser.add_argument("--calls", default="prefill", choices=shape.CALLS,
                        help="prefill: one call a layer over the whole prompt (default); serving: as an engine's "
                             "extend calls it: chunks over a paged pool, packed requests, topk_length")
    parser.add_argument("--chunk", type=int, default=None,
                        help=f"with --calls serving: tokens a chunk (default {shape.CPU_CHUNK} on the CPU, "
                             f"{shape.GPU_CHUNK} on a GPU)")
    parser.add_argument("--pool-rows", type=int, default=None,
                        help=f"with --calls serving: rows of the paged KV pool, a multiple of {shape.PAGE} (default "
                             f"{shape.CPU_POOL_ROWS} on the CPU; on a GPU past 2^31 elements, at least "
                             f"{shape.GPU_POOL_ROWS})")
    parser.add_argument("--requests", type=int, default=None,
                        help=f"with --calls serving: requests packed a call, the prompt and others (default "
                             f"{shape.DEFAULT_REQUESTS})")


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
