"""`glmcheck selfcheck`: the kernel on random inputs against the fp64 reference."""

from __future__ import annotations

import argparse

from glmcheck import __version__
from glmcheck.evaluate.arguments import check_seed


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def add_parser(sub) -> None:
    p = sub.add_parser("selfcheck", help="run the kernel on random inputs against the fp64 reference",
                       description="Random inputs, the Triton kernel against fp64/fp32 references. "
                                   "Default shape: GLM-5.x TP8 (T=S=4096, H=8, topk 2048, 512+64) on a "
                                   "GPU; a small shape on the CPU (Triton interpreter). A shape that does not "
                                   "fit the device's memory, or on the CPU would take more than 10 minutes, "
                                   "is refused before anything is allocated.")
    for flag in ("tokens", "heads", "kv-rows", "topk", "d-v"):
        p.add_argument(f"--{flag}", type=_positive_int, default=None)
    p.add_argument("--d-tail", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None, help="cpu or cuda[:N] (default: cuda when present)")
    p.set_defaults(handler=handle, precheck=precheck)


def precheck(ns: argparse.Namespace) -> None:
    check_seed(ns.seed)


def handle(ns: argparse.Namespace) -> int:
    precheck(ns)
    import glmcheck.kernels  # noqa: F401  (interpreter on CPU-only machines)
    from glmcheck.model.load import resolve_device
    from glmcheck.records.tables import fmt_cosine, fmt_sci, markdown_table
    from glmcheck.selftest import selfcheck

    device = resolve_device(ns.device)
    shape = selfcheck.default_shape(device)
    overrides = {k: getattr(ns, k) for k in ("tokens", "heads", "kv_rows", "topk", "d_v", "d_tail")
                 if getattr(ns, k) is not None}
    shape = selfcheck.SelfcheckShape(**{**shape.__dict__, **overrides})
    selfcheck.check_shape(shape, device)  # what the kernel cannot take, the device cannot hold, or runs for hours
    print(f"glmcheck {__version__} selfcheck on {device}: T={shape.tokens} H={shape.heads} "
          f"S={shape.kv_rows} topk={shape.topk} d_v={shape.d_v} d_tail={shape.d_tail} seed={ns.seed}")
    rows = selfcheck.run_selfcheck(shape, device, seed=ns.seed)
    table = [(r.comparison, fmt_cosine(r.cosine), fmt_sci(r.rel_l2), fmt_sci(r.max_abs), r.verdict) for r in rows]
    print(markdown_table(["comparison", "cosine", "rel L2", "max abs", "verdict"], table))
    print(f"gate: rel-L2 <= {selfcheck.REL_L2_GATE:g} and cosine >= {selfcheck.COSINE_GATE} "
          f"against the fp64 reference; reruns bitwise identical")
    ok = all(r.passed for r in rows)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1
