"""A rank rehearsal's record (`glmcheck.evaluate.rehearsal`) as printed: a loud banner (no verdict), then per
prompt length and attention path the time per forward and the peak memory against `glmcheck plan`'s estimate."""

from __future__ import annotations

from glmcheck.records.tables import Table


def _size(nbytes) -> str:
    """Bytes for a cell: '-' when not measured, MiB below 1 GiB, else GiB."""
    if nbytes is None:
        return "-"
    return f"{nbytes / 2**20:.1f} MiB" if nbytes < 2**30 else f"{nbytes / 2**30:.2f} GiB"


def rehearsal_parts(rehearsal: dict) -> list:
    """The banner, the build line and the forwards table of a record's `rehearsal` field."""
    held = rehearsal.get("held", {})
    build = (f"rank {rehearsal['rank']} of TP {rehearsal['tp']} on {rehearsal['device']} "
             f"({_size(rehearsal['device_bytes'])}), {rehearsal['weights']} weights: built in "
             f"{rehearsal['build_seconds']:.1f} s, holding {_size(held.get('total'))} (codes {_size(held.get('codes'))}"
             f", scales {_size(held.get('scales'))}, other {_size(held.get('dense'))}; allocated after the build "
             f"{_size(rehearsal.get('allocated_after_build'))}); plan: weights {_size(rehearsal.get('plan_weights'))}; "
             f"peak over the run: allocator {_size(rehearsal.get('peak_allocated'))}, device "
             f"{_size(rehearsal.get('peak_device'))}")
    rows = []
    for f in rehearsal.get("forwards", []):
        measured = f["allocated"] if f.get("allocated") is not None else f["device"]
        rows.append([str(f["tokens"]), f["path"], str(f["forwards"]), f"{f['seconds_median']:.3f} s",
                     f"{f['seconds_max']:.3f} s", _size(f.get("allocated")), _size(f.get("device")),
                     _size(f.get("plan")), f"{measured / f['plan']:.2f}" if f.get("plan") else "-",
                     f"{f['device'] / rehearsal['device_bytes']:.0%}"])
    headers = ["tokens", "attention", "forwards", "time / forward (median)", "slowest", "peak allocated",
               "peak device", "plan (weights + transient + activations)", "measured / plan", "of the device"]
    table = Table(headers, rows, short={"time / forward (median)": "s/fwd", "peak allocated": "alloc",
                                        "peak device": "device", "plan (weights + transient + activations)": "plan",
                                        "measured / plan": "/plan", "of the device": "of dev"},
                  legend="measured / plan: the allocator's peak (the device's on the CPU: the process's peak resident "
                         "set, Python and libraries included) over the plan's estimate;"
                         " device: the allocator's reserved peak and the CUDA context",
                  optional=("slowest", "of the device"))
    return [rehearsal["note"], build, table]
