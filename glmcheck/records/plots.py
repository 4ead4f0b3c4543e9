"""Figures drawn from run records (never from a model): used by `glmcheck report --plots` and
by notebooks/drift.ipynb, so both show the same pictures.

- `plot_layer0`: layer-0 rel-L2 per backend against the gate (gate_ratio x the noise band's max).
- `plot_drift`: per-layer rel-L2 per backend (log scale), the gate over the noise band shaded.
- `plot_firsttoken`: |Δ logprob| histogram per backend, and agreement vs the reference's
  top-1/top-2 gap (near ties).
- `plot_union`: union-of-G ratio vs sequence length.
- `plot_sweep`: each row's distance from the reference against the prompt length, the gate over the
  band shaded, each onset marked.
- `plot_tasks`: each candidate's accuracy difference per task with its paired bootstrap interval, the
  control's difference, and the largest acceptable drop.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from glmcheck.records.store import Record, find_records, read_record

FIGSIZE = (7.5, 4.2)


def _is_band_row(comparison: str) -> bool:
    return comparison.startswith("noise band:")


def plot_layer0(record: Record):
    """Bar chart of layer-0 rel-L2 per comparison (log scale) with the gate band."""
    rows = record.rows
    ratio = record.summary.get("options", {}).get("gate_ratio", 2.0)
    bound = record.summary.get("options", {}).get("max_rel_l2")
    band = rows[rows["comparison"].map(_is_band_row)]["rel_l2"].max()
    shown = rows[~rows["comparison"].map(_is_band_row)]
    fig, ax = plt.subplots(figsize=(FIGSIZE[0] * 1.35, FIGSIZE[1]))
    values = shown["rel_l2"].clip(lower=1e-12)
    colors = ["tab:red" if v == "FAIL" else "tab:blue" for v in shown["verdict"]]
    ax.barh(shown["comparison"], values, color=colors)
    ax.axvspan(1e-12, ratio * band, color="tab:green", alpha=0.15, label=f"{ratio:g} x the band's max")
    if bound:
        ax.axvline(bound, color="tab:red", linestyle="--", label=f"cap {bound:g}")
    ax.set_xscale("log")
    ax.set_xlim(left=max(values.min() / 3, 1e-9))
    ax.set_xlabel("rel-L2 against the reference (dimensionless, log scale)")
    ax.set_title(f"layer-0 attention output, {record.summary['facts'].get('tokens')} tokens")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


def plot_drift(record: Record):
    """rel-L2 vs layer per backend (log y), with the gate over the band's max shaded."""
    rows = record.rows
    fig, ax = plt.subplots(figsize=FIGSIZE)
    band_rows = rows[rows["comparison"].map(_is_band_row)]
    band = band_rows.groupby("layer")["rel_l2"].max()
    ratio = record.summary.get("options", {}).get("gate_ratio", 2.0)
    curves = rows[~rows["comparison"].map(_is_band_row)].dropna(subset=["layer"])
    positive = pd.concat([curves["rel_l2"], band])
    bottom = max(positive[positive > 0].min() / 10, 1e-12) if (positive > 0).any() else 1e-12
    ax.fill_between(band.index, bottom, (ratio * band).clip(lower=bottom), color="tab:green", alpha=0.15,
                    label=f"{ratio:g} x the band's max")
    for backend, group in curves.groupby("backend", sort=False):
        group = group.sort_values("layer")
        ax.plot(group["layer"], group["rel_l2"].clip(lower=bottom), marker="o", label=backend)
    ax.set_yscale("log")
    ax.set_ylim(bottom=bottom)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("layer")
    ax.set_ylabel("hidden-state rel-L2 against the reference (log scale)")
    ax.set_title(f"per-layer drift, {record.summary['facts'].get('tokens')} tokens")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_firsttoken(record: Record):
    """(left) |Δ logprob| histogram on agreeing prompts; (right) agreement vs reference gap."""
    rows = record.rows
    fig, (left, right) = plt.subplots(1, 2, figsize=(FIGSIZE[0] * 1.4, FIGSIZE[1]))
    for backend, group in rows.groupby("backend", sort=False):
        agreeing = group[group["agree"]]["dlogprob"].clip(lower=1e-9)
        if len(agreeing):
            bins = np.logspace(-9, 1, 41)
            left.hist(agreeing, bins=bins, alpha=0.5, label=backend)
        jitter = np.random.default_rng(0).uniform(-0.06, 0.06, len(group))
        right.scatter(group["ref_gap"], group["agree"].astype(float) + jitter, s=14, alpha=0.7, label=backend)
    tie_gap = record.summary.get("facts", {}).get("tie_gap")
    if tie_gap:
        right.axvline(tie_gap, color="gray", linestyle="--", label=f"tie gap {tie_gap:g} nats")
    left.set_xscale("log")
    left.set_xlabel("|Δ logprob| of the chosen token on agreeing prompts (nats, log scale; 0 at 1e-9)")
    left.set_ylabel("prompts")
    left.legend(fontsize=8)
    right.set_xlabel("reference top-1 minus top-2 logprob (nats)")
    right.set_ylabel("agrees with the reference (1 = yes)")
    right.set_yticks([0, 1])
    right.legend(fontsize=8)
    fig.suptitle(f"greedy first token, {record.summary.get('facts', {}).get('prompt_set')}")
    fig.tight_layout()
    return fig


def plot_union(record: Record):
    """Union-of-G ratio vs tokens per sequence, one line per G (and per index source)."""
    rows = record.rows
    fig, ax = plt.subplots(figsize=FIGSIZE)
    for (source, group_size), group in rows.groupby(["source", "group"], sort=False):
        group = group.sort_values("seq_len")
        ax.plot(group["seq_len"], group["union_ratio"], marker="o", label=f"{source}, union of {group_size}")
    ax.set_xlabel("tokens per sequence")
    ax.set_ylabel("union rows / rows per token (ratio)")
    ax.set_title("union of G adjacent tokens' selections")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_sweep(record: Record):
    """Distance (mean |dlogprob| over the reference's top-k) vs prompt length per judged row (log-log),
    the gate (gate_ratio x the band's max at each length) shaded, and a dashed line at each onset."""
    rows = record.rows
    facts = record.summary.get("facts", {})
    ratio = facts.get("gate_ratio", 2.0)
    positions = facts.get("statistic") == "positions"  # one forward, bins judged by the share of positions beyond
    fig, ax = plt.subplots(figsize=FIGSIZE)
    judged = rows[rows["role"] == "judged"].copy()
    if positions:
        judged["distance"] = judged["exceed"]
    limits = rows.groupby("tokens")["limit"].first().sort_index()
    positive = pd.concat([judged["distance"], limits])
    bottom = max(positive[positive > 0].min() / 10, 1e-9) if (positive > 0).any() else 1e-9
    ax.fill_between(limits.index, bottom, limits.clip(lower=bottom), color="tab:green", alpha=0.15,
                    label="the share of positions allowed beyond the band" if positions else
                    f"{ratio:g} x the band's max")
    onsets = record.summary.get("onsets", {})
    for backend, group in judged.groupby("backend", sort=False):
        group = group.sort_values("tokens")
        line, = ax.plot(group["tokens"], group["distance"].clip(lower=bottom), marker="o", label=backend)
        onset = (onsets.get(backend) or {}).get("onset")
        if onset:
            ax.axvline(onset, color=line.get_color(), linestyle="--", alpha=0.7)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_ylim(bottom=bottom)
    ax.set_xlabel("prompt length (tokens, log scale)")
    ax.set_ylabel("share of the bin's positions beyond the band (log)" if positions else
                  f"mean |dlogprob| over the reference's top-{facts.get('k', 5)} (nats, log)")
    ax.set_title("length sweep: distance from the reference (dashed: onset)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_tasks(record: Record):
    """Accuracy difference (candidate - reference, points) per task and candidate with its 95 % paired
    bootstrap interval; the control pair's difference as a grey tick; the largest acceptable drop dashed."""
    rows = record.rows
    max_drop = record.summary.get("options", {}).get("max_drop", 0.01)
    labels = [f"{r['task']}\n{r['candidate']}" for _, r in rows.iterrows()]
    fig, ax = plt.subplots(figsize=(FIGSIZE[0], max(2.5, 0.7 * len(rows) + 1.5)))
    y = np.arange(len(rows))
    diff = 100 * rows["difference"].to_numpy(dtype=float)
    low = diff - 100 * rows["interval_low"].to_numpy(dtype=float)
    high = 100 * rows["interval_high"].to_numpy(dtype=float) - diff
    colors = {"PASS": "tab:green", "FAIL": "tab:red"}
    for i, (_, r) in enumerate(rows.iterrows()):
        ax.errorbar(diff[i], y[i], xerr=[[low[i]], [high[i]]], fmt="o", capsize=4,
                    color=colors.get(r["verdict"], "tab:orange"))
        if r.get("control_difference") is not None and not pd.isna(r.get("control_difference")):
            ax.plot(100 * r["control_difference"], y[i], "|", color="gray", markersize=14)
    ax.axvline(-100 * max_drop, color="tab:red", linestyle="--", label=f"largest acceptable drop ({100 * max_drop:g})")
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yticks(y, labels)
    ax.set_xlabel("accuracy difference, candidate - reference (points; bar: 95 % paired bootstrap; |: control)")
    ax.set_title("task accuracy, paired question by question (green PASS, red FAIL, orange INCONCLUSIVE)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


PLOTTERS = {"layer0": plot_layer0, "drift": plot_drift, "firsttoken": plot_firsttoken, "union-stats": plot_union,
            "sweep": plot_sweep, "tasks": plot_tasks}


def write_plots(directory: str | Path) -> list[Path]:
    """Draw every plottable record under `directory`; PNGs go next to each record. Returns them."""
    written = []
    for record_dir in find_records(directory):
        record = read_record(record_dir)
        plotter = PLOTTERS.get(record.summary.get("command"))
        if plotter is None or not isinstance(record.rows, pd.DataFrame) or record.rows.empty:
            continue
        fig = plotter(record)
        path = Path(record_dir) / f"plot-{record.summary['command']}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
