"""The logits plot: KL(reference || row) at every position of the longest prompt, each judged row against the band
(the largest KL of the band's ideal kernels at each position, shaded), the row's verdict in the legend. The
per-position KL is the record's `kl_by_position` (records written before it have none: no plot)."""

from __future__ import annotations

import numpy as np

from glmcheck.records.plot_style import BAND_COLOR, FIGSIZE, MARKERS, VERDICT_COLORS, is_band_row
from glmcheck.records.store import Record

FLOOR = 1e-12  # a KL of 0 is drawn here (log scale), marked as such


def plot_logits(record: Record):
    """The figure (module docstring); ValueError when the record holds no per-position KL."""
    import matplotlib.pyplot as plt

    rows = record.rows
    if "kl_by_position" not in rows:
        raise ValueError("the logits record holds no per-position KL (written before glmcheck kept it): rerun it")
    tokens = int(rows["tokens"].max())
    rows = rows[(rows["tokens"] == tokens) & rows["kl_by_position"].notna()]
    band = [np.asarray(r["kl_by_position"], dtype=float) for _, r in rows.iterrows()
            if is_band_row(r["comparison"]) and "(rerun)" not in r["comparison"]]
    fig, ax = plt.subplots(figsize=(FIGSIZE[0] * 1.3, FIGSIZE[1]))
    if band:
        envelope = np.maximum(np.max(band, axis=0), FLOOR)
        ax.fill_between(np.arange(envelope.size), FLOOR, envelope, color=BAND_COLOR, alpha=0.35,
                        label=f"the band: the largest of {len(band)} ideal kernels' KL")
    judged = [r for _, r in rows.iterrows() if not is_band_row(r["comparison"])]
    for i, r in enumerate(judged):
        kl = np.maximum(np.asarray(r["kl_by_position"], dtype=float), FLOOR)
        verdict = r.get("verdict")
        ax.plot(np.arange(kl.size), kl, marker=MARKERS[i % len(MARKERS)], markersize=3, linewidth=0.8,
                markevery=max(1, kl.size // 40), color=VERDICT_COLORS.get(verdict),
                label=f"{r['backend']} ({verdict})" if verdict in VERDICT_COLORS else r["backend"])
    ax.axhline(FLOOR, color="gray", linestyle=":", linewidth=0.8, label=f"0 (drawn at {FLOOR:g})")
    ax.set_yscale("log")
    ax.set_ylim(bottom=FLOOR / 3)
    ax.set_xlabel("position in the prompt (its next-token distribution)")
    ax.set_ylabel("KL(reference || row), nats (log)")
    ax.set_title(f"logits, {tokens} tokens: KL per position against the band: {record.summary.get('verdict')}")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig
