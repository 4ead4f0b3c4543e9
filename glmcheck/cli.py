"""Command-line interface: a thin layer over the library (argparse subcommands).

Exit codes: 0 all checks pass, 1 a check failed, 2 bad usage or input (one-line message).
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from glmcheck import __version__


class UsageError(Exception):
    """Bad command-line input: reported in one line, exit code 2."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _resolve_device(name: str | None):
    import torch

    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UsageError(f"--device: expected cpu or cuda[:N], got {name!r}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device: cuda requested but no CUDA device is available")
    return device


def _cmd_selfcheck(ns: argparse.Namespace) -> int:
    import glmcheck.kernels  # noqa: F401  (interpreter on CPU-only machines)
    from glmcheck import selfcheck
    from glmcheck.tables import fmt_cosine, fmt_sci, markdown_table

    device = _resolve_device(ns.device)
    shape = selfcheck.default_shape(device)
    overrides = {k: getattr(ns, k) for k in ("tokens", "heads", "kv_rows", "topk", "d_v", "d_tail")
                 if getattr(ns, k) is not None}
    shape = selfcheck.SelfcheckShape(**{**shape.__dict__, **overrides})
    print(f"glmcheck {__version__} selfcheck on {device}: T={shape.tokens} H={shape.heads} "
          f"S={shape.kv_rows} topk={shape.topk} d_v={shape.d_v} d_tail={shape.d_tail} seed={ns.seed}")
    rows = selfcheck.run_selfcheck(shape, device, seed=ns.seed)
    table = [(r.comparison, fmt_cosine(r.cosine), fmt_sci(r.rel_l2), fmt_sci(r.max_abs), r.verdict)
             for r in rows]
    print(markdown_table(["comparison", "cosine", "rel L2", "max abs", "verdict"], table))
    print(f"gate: rel-L2 <= {selfcheck.REL_L2_GATE:g} and cosine >= {selfcheck.COSINE_GATE} "
          f"against the fp64 reference; reruns bitwise identical")
    ok = all(r.passed for r in rows)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="glmcheck", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"glmcheck {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("selfcheck", help="run the kernel on random inputs against the fp64 reference",
                       description="Random inputs, the Triton kernel against fp64/fp32 references. "
                                   "Default shape: GLM-5.x TP8 (T=S=4096, H=8, topk 2048, 512+64) on a "
                                   "GPU; a small shape on the CPU (Triton interpreter).")
    for flag in ("tokens", "heads", "kv-rows", "topk", "d-v", "d-tail"):
        p.add_argument(f"--{flag}", type=_positive_int if flag != "d-tail" else int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None, help="cpu or cuda[:N] (default: cuda when present)")
    p.set_defaults(handler=_cmd_selfcheck)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    try:
        return ns.handler(ns)
    except (UsageError, ValueError, TypeError, FileNotFoundError) as err:
        print(f"glmcheck {ns.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"glmcheck {ns.command}: interrupted", file=sys.stderr)
        return 130
