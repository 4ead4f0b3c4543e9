"""The diagnosis drawn (`glmcheck report --plots`): for each diagnosed FAIL row of a layer0 or drift record, its error
by head and by position beside the band's (`glmcheck.checks.diagnosis`: the profiles its record keeps).

Left, per head: the row's error norm and the band's largest over the same head (log scale). Right, per position
(bins of positions on long prompts): the same two curves. A drift row without a kernel-level diagnosis (its layer's
attention alone within the band) shows its hidden state's error by position only.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from glmcheck.records.store import Record

ROWS = 6  # diagnosed rows drawn, at most
ROW_COLOR, BAND_COLOR = "tab:red", "0.5"


def has_diagnosis(record: Record) -> bool:
    return bool((record.summary.get("facts") or {}).get("diagnoses"))


def _floor(values: list[float]) -> float:
    positive = [v for v in values if v > 0]
    return min(positive) / 10 if positive else 1e-12


def plot_diagnosis(record: Record):
    """One line of two panels a diagnosed row (module docstring), each titled by the row and its first finding."""
    entries = record.summary["facts"]["diagnoses"][:ROWS]
    fig, axes = plt.subplots(len(entries), 2, figsize=(11, 2.6 * len(entries) + 0.6), squeeze=False)
    for (heads_ax, positions_ax), entry in zip(axes, entries):
        name = entry["backend"] + (f", layer {entry['layer']}" if entry.get("layer") is not None else "")
        found = entry.get("findings") or []
        profile = entry.get("profile", {})
        heads = profile.get("heads")
        if heads:
            x = np.arange(len(heads["row"]))
            floor = _floor(heads["row"] + heads["band"])
            heads_ax.bar(x - 0.2, np.maximum(heads["row"], floor), 0.4, color=ROW_COLOR, label="row")
            heads_ax.bar(x + 0.2, np.maximum(heads["band"], floor), 0.4, color=BAND_COLOR, label="band's largest")
            heads_ax.set_yscale("log")
            heads_ax.set_xlabel("head")
            heads_ax.set_ylabel("error norm (log)")
            heads_ax.legend(fontsize=7)
        else:
            heads_ax.axis("off")
        positions = profile.get("call_positions") or profile.get("positions")
        if positions:
            x = np.asarray(positions["start"]) + (positions["width"] - 1) / 2
            floor = _floor(positions["row"] + positions["band"])
            positions_ax.plot(x, np.maximum(positions["row"], floor), color=ROW_COLOR, label="row")
            positions_ax.plot(x, np.maximum(positions["band"], floor), color=BAND_COLOR, label="band's largest")
            positions_ax.set_yscale("log")
            width = positions["width"]
            positions_ax.set_xlabel("token position" + (f" (bins of {width})" if width > 1 else ""))
            positions_ax.legend(fontsize=7)
        heads_ax.set_title(f"{name}: {found[0]['text'][:90] if found else 'no finding'}", fontsize=8, loc="left")
    fig.suptitle(f"{record.summary.get('command')}: where each FAIL row's error lies (fp64, beside the band)",
                 fontsize=10)
    fig.tight_layout()
    return fig
