"""`backends_here`: every backend found (built in, transformers' own attention, installed packages' entry points, the
specs named), where it came from and whether it runs on a device, as a `Report` whose render is the table
`glmcheck backends` prints.

Light module (no torch at import): the registry is imported when it runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from glmcheck.evaluate.arguments import check_count
from glmcheck.process.wording import flag

if TYPE_CHECKING:
    from glmcheck.evaluate.report import Report


def backends_here(backends: str | list[str] | None = None, *, device: str | None = None, heads: int = 8) -> Report:
    """Every backend known, `backends` (specs such as `mine=pkg.mod:fn`, a list or one comma-separated string) loaded
    first, each with its source and whether it can run on `device` (None: CUDA when present) at `heads` attention heads
    per rank: "yes" (with its warnings) or "no: why". A spec that does not load raises (BackendError, a ValueError
    naming it). A listing: verdict PASS; one row per backend."""
    from glmcheck.backends.errors import BackendError
    from glmcheck.backends.registry import backend_source, resolve_backend
    from glmcheck.backends.validation import HF_NAMES, all_backend_names, validate_backend
    from glmcheck.checks.band import PASS
    from glmcheck.evaluate.report import Report
    from glmcheck.model.load import resolve_device
    from glmcheck.records.tables import markdown_table

    check_count(heads, flag("heads"))
    where = resolve_device(device)
    specs = [s.strip() for s in (backends.split(",") if isinstance(backends, str) else backends or []) if s.strip()]
    for spec in specs:  # a spec that does not load is a usage error, as in the checks
        resolve_backend(spec)
    rows = []
    for name in all_backend_names():
        try:
            warnings = validate_backend(name, device=where, heads_per_rank=heads)
            runs = "yes" + (f" ({'; '.join(warnings)})" if warnings else "")
        except BackendError as err:
            runs = f"no: {err}"
        source = "transformers (no swap)" if name in HF_NAMES else backend_source(name)
        rows.append({"backend": name, "source": source, "runs_here": runs})
    table = markdown_table(["backend", "from", f"runs here ({where}, {heads} heads per rank)"],
                           [[r["backend"], r["source"], r["runs_here"]] for r in rows])
    return Report("backends", PASS, rows, {}, {}, {"backends": specs, "device": str(where), "heads": heads},
                  extra={"table": table})
