"""`glmcheck kernel-check` (formerly `selfcheck`): the kernel on random inputs against the fp64 reference
(`glmcheck.evaluate.kernel_check`)."""

from __future__ import annotations

import argparse

from glmcheck.evaluate.arguments import check_seed

HELP = "run the kernel on random inputs against the fp64 reference"
DESCRIPTION = ("Random inputs, the Triton kernel against fp64/fp32 references. Default shape: GLM-5.x TP8 (T=S=4096, "
               "H=8, topk 2048, 512+64) on a GPU; a small shape on the CPU (Triton interpreter). A shape that does "
               "not fit the device's memory, or on the CPU would take more than 10 minutes, is refused before "
               "anything is allocated. (glmcheck selftest instead asks whether the accuracy suite catches planted "
               "faults.)")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def add_parser(sub) -> None:
    add_options(sub.add_parser("kernel-check", help=HELP, description=DESCRIPTION))


def add_options(p: argparse.ArgumentParser) -> None:
    """The shape, seed and device options (shared with the `selfcheck` alias)."""
    for flag in ("tokens", "heads", "kv-rows", "topk", "d-v"):
        p.add_argument(f"--{flag}", type=_positive_int, default=None)
    p.add_argument("--d-tail", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None, help="cpu or cuda[:N] (default: cuda when present)")
    p.set_defaults(handler=handle, precheck=precheck)


def precheck(ns: argparse.Namespace) -> None:
    check_seed(ns.seed)


def handle(ns: argparse.Namespace) -> int:
    from glmcheck.evaluate import kernel_check

    report = kernel_check(tokens=ns.tokens, heads=ns.heads, kv_rows=ns.kv_rows, topk=ns.topk, d_v=ns.d_v,
                          d_tail=ns.d_tail, seed=ns.seed, device=ns.device)
    print(report.render())
    return report.exit_code
