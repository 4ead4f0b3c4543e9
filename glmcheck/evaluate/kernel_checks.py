"""`kernel_check`: the kernel at one shape on random inputs against the fp64 reference (`glmcheck.checks.kernel_check`),
as a `Report` whose render is what `glmcheck kernel-check` prints.

Light module (no torch at import): the check is imported when it runs.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from glmcheck.evaluate.arguments import check_count, check_seed
from glmcheck.process.wording import flag

if TYPE_CHECKING:
    from glmcheck.evaluate.report import Report


def kernel_check(*, tokens: int | None = None, heads: int | None = None, kv_rows: int | None = None,
                 topk: int | None = None, d_v: int | None = None, d_tail: int | None = None, seed: int = 0,
                 device: str | None = None) -> Report:
    """The kernel's paths on random inputs of one shape against the fp64 reference, beside the fp32 reference and a
    rerun (bitwise). The shape's fields left None take the device's default (GLM-5.x TP8 on a GPU: T = S = 4096, H = 8,
    top-k 2048, 512 + 64; a small one on the CPU). ValueError naming the argument for a shape the kernel cannot take,
    the device cannot hold or the CPU would run for hours, before anything is allocated. Verdict PASS when every gated
    row passes; one row per comparison."""
    import glmcheck.kernels  # noqa: F401  (the interpreter on a machine without CUDA)
    from glmcheck import __version__
    from glmcheck.checks.band import FAIL, PASS
    from glmcheck.checks.kernel_check import (
        COSINE_GATE,
        REL_L2_GATE,
        KernelShape,
        check_shape,
        default_shape,
        run_kernel_check,
    )
    from glmcheck.evaluate.report import Report
    from glmcheck.model.load import resolve_device
    from glmcheck.records.tables import fmt_cosine, fmt_sci, markdown_table

    given = {"tokens": tokens, "heads": heads, "kv_rows": kv_rows, "topk": topk, "d_v": d_v, "d_tail": d_tail}
    for name, value in given.items():  # d_tail: 0 or a power of two (`check_shape`)
        check_count(value, flag(name), minimum=-2**63 if name == "d_tail" else 1)
    check_seed(seed)
    where = resolve_device(device)
    shape = KernelShape(**{**dataclasses.asdict(default_shape(where)),
                           **{k: v for k, v in given.items() if v is not None}})
    check_shape(shape, where)
    rows = run_kernel_check(shape, where, seed=seed)
    verdict = PASS if all(r.passed for r in rows) else FAIL
    head = (f"glmcheck {__version__} kernel-check on {where}: T={shape.tokens} H={shape.heads} S={shape.kv_rows} "
            f"topk={shape.topk} d_v={shape.d_v} d_tail={shape.d_tail} seed={seed}")
    table = markdown_table(["comparison", "cosine", "rel L2", "max abs", "verdict"],
                           [(r.comparison, fmt_cosine(r.cosine), fmt_sci(r.rel_l2), fmt_sci(r.max_abs), r.verdict)
                            for r in rows])
    gate = (f"gate: rel-L2 <= {REL_L2_GATE:g} and cosine >= {COSINE_GATE} against the fp64 reference; reruns bitwise "
            f"identical")
    return Report("kernel-check", verdict, [dataclasses.asdict(r) for r in rows],
                  {"rel_l2_gate": REL_L2_GATE, "cosine_gate": COSINE_GATE}, {},
                  {**dataclasses.asdict(shape), "seed": seed, "device": str(where)},
                  extra={"table": f"{head}\n{table}\n{gate}\n{verdict}"})
