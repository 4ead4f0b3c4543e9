"""Figures drawn from run records (never from a model): used by `glmcheck report --plots` and
by notebooks/drift.ipynb, so both show the same pictures.

- `plot_layer0`: layer-0 rel-L2 of every row, the band's rows too, each judged row marked by its verdict, against
  the gate (gate_ratio x the noise band's max).
- `plot_drift`: per-layer rel-L2 per backend (log scale), each backend's marker and verdict, the band's max and the
  gate over it.
- `plot_firsttoken`: per backend, one row each: |Δ logprob| per prompt, and agreement vs the reference's
  top-1/top-2 gap (near ties), each row's verdict named.
- `plot_union`: union-of-G ratio vs sequence length.
- `plot_sweep`: each row's distance from the reference against the prompt length, the gate over the
  band shaded, each onset marked, each row its marker and verdict.
- `plot_tasks`: each candidate's accuracy difference per task with its paired bootstrap interval, the
  control's difference, and the largest acceptable drop.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.patches import Patch

from glmcheck.records.plot_style import (
    BAND_COLOR,
    FIGSIZE,
    FLIP_COLOR,
    INFO_COLOR,
    MARKERS,
    VERDICT_COLORS,
    is_band_row,
)
from glmcheck.records.plots_diagnosis import has_diagnosis, plot_diagnosis
from glmcheck.records.store import Record, find_records, read_record


def plot_layer0(record: Record):
    """One bar per row (log scale): the band's rows grey, each judged row coloured and labelled by its verdict, an
    informational row blue; the gate (gate_ratio x the band's max) shaded and the band's max drawn."""
    rows = record.rows.iloc[::-1]  # the table's order, top to bottom
    ratio = record.summary.get("options", {}).get("gate_ratio", 2.0)
    bound = record.summary.get("options", {}).get("max_rel_l2")
    band_rows = rows["comparison"].map(is_band_row)
    band = rows[band_rows]["rel_l2"].max()
    fig, ax = plt.subplots(figsize=(FIGSIZE[0] * 1.6, max(FIGSIZE[1], 0.32 * len(rows) + 1.2)))
    values = rows["rel_l2"].fillna(0).clip(lower=1e-12)
    colors = [BAND_COLOR if is_band else VERDICT_COLORS.get(v, INFO_COLOR) for is_band, v in
              zip(band_rows, rows["verdict"])]
    y = np.arange(len(rows))
    ax.barh(y, values, color=colors)
    ax.set_yticks(y, [re.sub(r" \(ideal \S+ kernel\)", "", c.replace("noise band: ", "band: "))
                      .replace(" (per-head value output)", " (value output)") for c in rows["comparison"]], fontsize=8)
    for i, (is_band, verdict, value) in enumerate(zip(band_rows, rows["verdict"], values)):
        if not is_band and verdict in VERDICT_COLORS:
            ax.text(value * 1.08, i, verdict, va="center", fontsize=7, color=VERDICT_COLORS[verdict])
        elif value <= 1e-12:
            ax.text(0.01, i, "0 (bit for bit)", va="center", fontsize=7, color="0.4",
                    transform=ax.get_yaxis_transform())
    if band > 0:
        ax.axvspan(1e-12, ratio * band, color="tab:green", alpha=0.12, label=f"gate: {ratio:g} x the band's max")
        ax.axvline(band, color=BAND_COLOR, linestyle=":", label="the band's max")
    if bound:
        ax.axvline(bound, color="tab:red", linestyle="--", label=f"cap {bound:g}")
    ax.set_xscale("log")
    positive = values[values > 1e-12]
    ax.set_xlim(left=max(positive.min() / 3, 1e-9) if len(positive) else 1e-9, right=values.max() * 3)
    ax.set_xlabel("rel-L2 against the exact reference (log scale)")
    ax.set_title(f"layer-0 attention output, {record.summary['facts'].get('tokens')} tokens: "
                 f"{record.summary.get('verdict')}")
    keys = [Patch(color=BAND_COLOR, label="the band's rows")] + \
        [Patch(color=c, label=v) for v, c in VERDICT_COLORS.items()] + [Patch(color=INFO_COLOR, label="not judged")]
    ax.legend(handles=ax.get_legend_handles_labels()[0] + keys, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              fontsize=8)
    fig.tight_layout()
    return fig


def _worst_verdict(verdicts) -> str | None:
    """A backend's verdict over its rows: FAIL before INCONCLUSIVE before PASS; None when no row is judged."""
    seen = set(verdicts)
    return next((v for v in ("FAIL", "INCONCLUSIVE", "PASS") if v in seen), None)


def plot_drift(record: Record):
    """rel-L2 vs layer per backend (log y), each backend its own marker and its verdict in the legend (a FAIL drawn
    dashed), the band's max per layer drawn and the gate over it shaded."""
    rows = record.rows
    fig, ax = plt.subplots(figsize=FIGSIZE)
    band_rows = rows[rows["comparison"].map(is_band_row)]
    band = band_rows.groupby("layer")["rel_l2"].max()
    ratio = record.summary.get("options", {}).get("gate_ratio", 2.0)
    curves = rows[~rows["comparison"].map(is_band_row)].dropna(subset=["layer"])
    positive = pd.concat([curves["rel_l2"], band])
    bottom = max(positive[positive > 0].min() / 10, 1e-12) if (positive > 0).any() else 1e-12
    ax.fill_between(band.index, bottom, (ratio * band).clip(lower=bottom), color="tab:green", alpha=0.15,
                    label=f"gate: {ratio:g} x the band's max")
    if len(band):
        ax.plot(band.index, band.clip(lower=bottom), color=BAND_COLOR, linestyle=":", label="the band's max")
    for i, (backend, group) in enumerate(curves.groupby("backend", sort=False)):
        group = group.sort_values("layer")
        verdict = _worst_verdict(group["verdict"]) if "verdict" in group else None
        ax.plot(group["layer"], group["rel_l2"].clip(lower=bottom), marker=MARKERS[i % len(MARKERS)],
                linestyle="--" if verdict == "FAIL" else "-",
                label=f"{backend} ({verdict})" if verdict else backend)
    ax.set_yscale("log")
    ax.set_ylim(bottom=bottom)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("layer")
    ax.set_ylabel("hidden-state rel-L2 against the reference (log scale)")
    ax.set_title(f"per-layer drift, {record.summary['facts'].get('tokens')} tokens: {record.summary.get('verdict')}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig




def plot_firsttoken(record: Record):
    """One row per backend, the band's rows first and grey: (left) |Δ logprob| of the reference's token on each
    prompt; (right) each prompt at the reference's top-1/top-2 gap, a filled mark where the backend agrees and a red
    x where it flips, the tie gap dashed. Each backend its own row and marker, so none hides another."""
    rows = record.rows
    names = list(dict.fromkeys(rows["backend"]))
    verdicts = {r["backend"]: r["verdict"] for r in record.summary.get("summary_rows", [])}
    fig, (left, right) = plt.subplots(1, 2, sharey=True,
                                      figsize=(FIGSIZE[0] * 1.5, max(FIGSIZE[1], 0.35 * len(names) + 1.4)))
    jitter = np.random.default_rng(0).uniform(-0.18, 0.18, len(rows))
    for i, name in enumerate(names):
        mine = rows["backend"] == name
        group, offset = rows[mine], jitter[mine.to_numpy()]
        band = name.startswith("band:") or name.endswith("(rerun)")
        color = BAND_COLOR if band else VERDICT_COLORS.get(verdicts.get(name), INFO_COLOR)
        marker = MARKERS[i % len(MARKERS)]
        y = len(names) - 1 - i + offset
        left.scatter(group["dlogprob"].fillna(0).clip(lower=1e-9), y, s=16, marker=marker, color=color, alpha=0.8)
        agree = group["agree"].astype(bool).to_numpy()
        right.scatter(group["ref_gap"][agree], y[agree], s=16, marker=marker, color=color, alpha=0.8)
        right.scatter(group["ref_gap"][~agree], y[~agree], s=40, marker="x", color=FLIP_COLOR)
    labels = [f"{n} ({verdicts[n]})" if verdicts.get(n) in VERDICT_COLORS else n for n in names]
    left.set_yticks(range(len(names)), labels[::-1], fontsize=8)
    tie_gap = record.summary.get("facts", {}).get("tie_gap")
    if tie_gap:
        right.axvline(tie_gap, color="gray", linestyle="--", label=f"tie gap {tie_gap:.3g} nats")
        right.legend(fontsize=8, loc="lower right")
    left.set_xscale("log")
    left.set_xlabel("|Δ logprob| of the reference's token, per prompt (nats, log; 0 at 1e-9)", fontsize=8)
    right.set_xlabel("reference top-1 minus top-2 logprob (nats); black x: a flip", fontsize=8)
    count = rows["prompt_id"].nunique() if "prompt_id" in rows else 0
    fig.suptitle(f"greedy first token, {count} prompt{'s' if count != 1 else ''} of "
                 f"{record.summary.get('facts', {}).get('prompt_set')} "
                 f"(grey: the band; green PASS, red FAIL, orange INCONCLUSIVE)", fontsize=10)
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
    """Distance (mean |dlogprob| over the reference's top-k) vs prompt length per judged row (log-log), each row its
    own marker and its verdict in the legend, the gate (gate_ratio x the band's max at each length) shaded, and a
    dashed line at each onset."""
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
    drawn_onset = False
    groups = list(judged.groupby("backend", sort=False))
    for i, (backend, group) in enumerate(groups):
        group = group.sort_values("tokens")
        verdict = _worst_verdict(group["verdict"]) if "verdict" in group else None
        dodge = 2 ** (0.04 * (i - (len(groups) - 1) / 2))  # rows at the same value side by side, not on top
        line, = ax.plot(group["tokens"] * dodge, group["distance"].clip(lower=bottom), marker=MARKERS[i % len(MARKERS)],
                        label=f"{backend} ({verdict})" if verdict else backend)
        onset = (onsets.get(backend) or {}).get("onset")
        if onset:
            drawn_onset = True
            ax.axvline(onset, color=line.get_color(), linestyle="--", alpha=0.7)
    ax.axhline(bottom, color="gray", linestyle=":", linewidth=0.8, label="0 (drawn at this floor)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_ylim(bottom=bottom / 3)  # the zeros' floor stays visible above the axis
    ax.set_xlabel("prompt length (tokens, log scale)")
    ax.set_ylabel("share of the bin's positions beyond the band (log)" if positions else
                  f"mean |dlogprob| over the reference's top-{facts.get('k', 5)} (nats, log)")
    ax.set_title("length sweep: distance from the reference" + (" (dashed: onset)" if drawn_onset else
                                                                "; no row left the band"))
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


def plot_logits(record: Record):
    """KL per position against the band (`glmcheck.records.plot_logits`)."""
    from glmcheck.records.plot_logits import plot_logits as draw

    return draw(record)


PLOTTERS = {"layer0": plot_layer0, "drift": plot_drift, "firsttoken": plot_firsttoken, "union-stats": plot_union,
            "sweep": plot_sweep, "tasks": plot_tasks, "logits": plot_logits}


def write_plots(directory: str | Path, on_skip: Callable[[Path, str], None] | None = None) -> list[Path]:
    """Draw every plottable record under `directory`; PNGs go next to each record. Returns them; `on_skip(record
    directory, why)` hears of each record not drawn (a record edited after it was written is refused:
    `glmcheck.records.digest`, `glmcheck.records.rejudge`)."""
    from glmcheck.records.rejudge import check_verdicts

    written = []
    for record_dir in find_records(directory):
        try:
            record = read_record(record_dir)
            check_verdicts(record.summary, record.rows)
        except ValueError as err:  # a record edited after it was written is not drawn
            if on_skip is not None:
                on_skip(Path(record_dir), f"refused: {err}")
            continue
        command = record.summary.get("command")
        plotter = PLOTTERS.get(command)
        why = f"no plot for a {command} record (plots: {', '.join(PLOTTERS)})" if plotter is None else \
            "the record has no rows" if not isinstance(record.rows, pd.DataFrame) or record.rows.empty else ""
        if why:
            if on_skip is not None:
                on_skip(Path(record_dir), why)
            continue
        try:
            fig = plotter(record)
        except ValueError as err:  # a record without what its plot draws (a logits record before per-position KL)
            if on_skip is not None:
                on_skip(Path(record_dir), str(err))
            continue
        path = Path(record_dir) / f"plot-{record.summary['command']}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
        if has_diagnosis(record):  # a layer0 or drift record's FAIL rows: error by head and by position
            fig = plot_diagnosis(record)
            path = Path(record_dir) / "plot-diagnosis.png"
            fig.savefig(path, dpi=110)
            plt.close(fig)
            written.append(path)
    return written
