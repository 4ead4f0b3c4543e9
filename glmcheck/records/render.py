"""Render a run record (summary + rows) as the tables the CLI prints; `glmcheck report` reuses it.

One rendering path for a fresh run and a re-read record, so the two always agree. Four forms (`FORMATS`): `text`
fits a terminal of 120 columns (`glmcheck.records.terminal`), `wide` every column and note in full, `md` a
markdown document with the run's metadata, `json` the record's rows (and verdict, facts) as JSON.
"""

from __future__ import annotations

import math
import re
import statistics

import pandas as pd

from glmcheck.checks.band import INCONCLUSIVE
from glmcheck.checks.diagnosis_text import parts as diagnosis_parts
from glmcheck.checks.diagnosis_text import position_lines
from glmcheck.records.engine_table import engine_call_parts
from glmcheck.records.json_rows import render_json
from glmcheck.records.llama_table import llama_tables
from glmcheck.records.record_fields import check_record
from glmcheck.records.tables import Table, fmt_cosine, fmt_sci
from glmcheck.records.terminal import render_text

MISSING = "-"  # a cell that does not apply (or was not measured); a measured NaN prints `nan`
# A record's measured columns when it has no `nonfinite` column.
LEGACY_MEASURED = frozenset({"cosine", "rel_l2", "max_abs"})


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _fmt(value, kind: str, measured: bool = True) -> str:
    """A cell: `-` when it has no value (None, or a NaN not `measured`: see `_nonfinite`), `nan` for
    a measured NaN."""
    if value is None:
        return MISSING
    if _missing(value):
        return "nan" if measured else MISSING
    if kind == "cos":
        return fmt_cosine(float(value))
    if kind == "sci":
        return fmt_sci(float(value))
    if kind == "bias":
        return f"{float(value):+.2e}"
    if kind == "f4":
        return f"{float(value):.4f}"
    if kind in ("e1", "e2"):
        return f"{float(value):.{kind[1]}e}"
    return str(value)


def _nonfinite(row) -> frozenset[str]:
    """The statistics of a comparison row that a backend measured as NaN (`ComparisonRow.as_dict`);
    any other NaN cell is one that does not apply. A record without the column: its cosine, rel-L2
    and max-abs."""
    names = row.get("nonfinite")
    if isinstance(names, str):
        return frozenset(n for n in names.split(",") if n)
    return LEGACY_MEASURED


def _cell(row, key: str, kind: str) -> str:
    """Row `row`'s statistic `key` (absent: `-`)."""
    return _fmt(row.get(key), kind, key in _nonfinite(row))


def _band_line(rows: pd.DataFrame, key: str = "rel_l2") -> str:
    """min / median / max of the band rows' statistic (rows whose comparison starts "noise band:")."""
    band = rows[rows["comparison"].str.startswith("noise band:")]
    values = sorted(float(v) for v in band[key] if v is not None and not math.isnan(float(v))) \
        if key in band else []
    if not values:
        return "band: none"
    median = statistics.median(values)
    return (f"band ({len(values)} samples: rerun + ideal kernels), rel-L2 to the exact reference: "
            f"min {fmt_sci(values[0])} / median {fmt_sci(median)} / max {fmt_sci(values[-1])}")


def short_label(comparison: str, previous: str | None = None) -> str:
    """A comparison's name in a terminal table: the row's backend (its reference is in the title), a band row
    marked `(band)`, a per-token pair `  vs OTHER` under the row it pairs (`previous`, that row's short label)."""
    if re.fullmatch(r"noise band: \S+ vs itself \(rerun\)", comparison):
        return "rerun (band)"
    if m := re.fullmatch(r"noise band: (\S+) vs \S+( \(ideal \S+ kernel\))?", comparison):
        return f"{m[1]} (band)"
    if m := re.fullmatch(r"(\S+) vs (\S+) \(per-token\)", comparison):
        return f"  vs {m[2]}" if previous == m[1] else f"{m[1]} vs {m[2]}"
    if m := re.fullmatch(r"(\S+) vs \S+ \(per-head value output\)", comparison):
        return f"{m[1]} (value output)"
    if m := re.fullmatch(r"(\S+) vs \S+", comparison):
        return m[1]
    return comparison


def _short_labels(comparisons) -> list[str]:
    labels: list[str] = []
    for comparison in comparisons:
        labels.append(short_label(comparison, labels[-1] if labels else None))
    return labels


LABEL_LEGEND = ("rows against the exact reference; (band): the band's samples; '  vs X': the row above against X, "
                "token by token")


def _comparison_table(rows: pd.DataFrame, with_argmax: bool, baseline: str | None = None,
                      per_token: bool = False, judged: bool = True) -> Table:
    """One line per row: distances to the exact reference (and the baseline), and (`judged`) verdict, note."""
    vs_baseline = f"rel_l2_vs_{baseline}" if baseline and f"rel_l2_vs_{baseline}" in rows else None
    temperature = per_token and "temperature_bias" in rows  # a record may lack the column
    headers = ["comparison", "cosine", "rel L2 (exact)"] + ([f"rel L2 ({baseline})"] if vs_baseline else []) \
        + (["token max rel L2", "scale bias"] if per_token else []) \
        + (["temperature bias"] if temperature else []) + ["max abs"] \
        + (["argmax"] if with_argmax else []) + (["verdict", "note"] if judged else [])
    table = []
    for _, r in rows.iterrows():
        line = [r["comparison"], _cell(r, "cosine", "cos"), _cell(r, "rel_l2", "sci")]
        if vs_baseline:
            line.append(_cell(r, vs_baseline, "sci") if r["backend"] != baseline else MISSING)
        if per_token:
            line += [_cell(r, "token_max_rel_l2", "sci"), _cell(r, "scale_bias", "bias")]
        if temperature:
            line.append(_cell(r, "temperature_bias", "bias"))
        line.append(_cell(r, "max_abs", "sci"))
        if with_argmax:
            same = r.get("argmax_same")
            line.append(MISSING if _missing(same) else ("same" if bool(same) else "differs"))
        if judged:
            line += [r["verdict"], r.get("note") or ""]
        table.append(line)
    short = {"rel L2 (exact)": "rel L2", "token max rel L2": "token max", "temperature bias": "temp. bias",
             f"rel L2 ({baseline})": f"vs {baseline}"[:12]}
    return Table(headers, table, short, _short_labels(rows["comparison"]), "note" if judged else None,
                 ("cosine", "max abs"), legend=LABEL_LEGEND)


def _position_table(rows: pd.DataFrame) -> Table:
    """The all-position statistics of each row (`glmcheck.checks.positions`), its verdict and note."""
    headers = ["comparison", "mean KL [95 %]", "median KL", "p99 KL", "max KL", "same top", "beyond band",
               "verdict", "note"]
    table = []
    for _, r in rows.iterrows():
        interval = MISSING if _missing(r.get("mean_kl_low")) else \
            f"{_fmt(r.get('mean_kl'), 'e2')} [{_fmt(r.get('mean_kl_low'), 'e1')}, {_fmt(r.get('mean_kl_high'), 'e1')}]"
        if _missing(r.get("mean_kl")):
            interval = _cell(r, "mean_kl", "sci")
        same = r.get("same_top")
        exceed = r.get("exceed")
        table.append([r["comparison"], interval, _cell(r, "kl_p50", "sci"), _cell(r, "kl_p99", "sci"),
                      _cell(r, "kl_max", "sci"), MISSING if _missing(same) else f"{float(same):.1%}",
                      MISSING if _missing(exceed) else f"{float(exceed):.1%}", r["verdict"], r.get("note") or ""])
    return Table(headers, table, {}, _short_labels(rows["comparison"]), "note", ("median KL", "max KL", "p99 KL"),
                 legend=LABEL_LEGEND)


def _render_layer0(summary: dict, rows: pd.DataFrame) -> list[str | Table]:
    baseline = summary["facts"].get("baseline")
    return [f"layer-0 attention output, {summary['facts'].get('tokens')} tokens", _band_line(rows),
            _comparison_table(rows, False, baseline, per_token="token_max_rel_l2" in rows),
            *diagnosis_parts(summary["facts"])]


def _render_logits(summary: dict, rows: pd.DataFrame) -> list[str | Table]:
    parts = []
    for tokens, group in rows.groupby("tokens", sort=False):
        dense = " (dense attention applied)" if any(group["note"].fillna("").str.contains("dense")) else ""
        if "mean_kl" not in group:  # a record from before every position was judged
            parts += [f"final-position logits, {tokens} tokens{dense}", _band_line(group),
                      _comparison_table(group, True, summary["facts"].get("baseline"))]
            continue
        llama = llama_tables(group, _short_labels(group["comparison"]), LABEL_LEGEND)  # records.llama_table
        parts += [(f"next-token distributions at every position, {tokens} tokens{dense}: KL(reference || row) in "
                   f"nats, judged"), _position_table(group), *llama,
                  f"the final position alone (one sample: informational), {tokens} tokens", _band_line(group),
                  _comparison_table(group, True, summary["facts"].get("baseline"), judged=False)]
    diagnosed = rows[rows["diagnosis"].map(lambda d: isinstance(d, str) and bool(d))] if "diagnosis" in rows else []
    return parts + position_lines([(f"{r['backend']}, {r['tokens']} tokens", r["diagnosis"])
                                   for _, r in (diagnosed.iterrows() if len(diagnosed) else [])])


def _render_firsttoken(summary: dict, rows: pd.DataFrame) -> list[str | Table]:
    from glmcheck.checks.continuation import CONTINUE_TOP_K

    table = [[r["comparison"], f"{r['agree']}/{r['prompts']}", _fmt(r["mean_dlogprob"], "sci"),
              _fmt(r["max_dlogprob"], "sci"), str(r["wide_flips"]), r["verdict"]]
             + ([str(r["identical_continuations"])] if "identical_continuations" in r else [])
             + ([str(r["outside_topk"])] if "outside_topk" in r else []) + [r.get("note", "")]
             for r in summary.get("summary_rows", [])]
    headers = ["comparison", "argmax agree", "mean |dlogprob|", "max |dlogprob|", "flips beyond tie gap", "verdict"]
    if summary.get("facts", {}).get("continue_tokens"):
        headers.append(f"identical {summary['facts']['continue_tokens']}-token continuations")
        if any("outside_topk" in r for r in summary.get("summary_rows", [])):
            headers.append(f"diverged outside top-{CONTINUE_TOP_K}")
    headers.append("note")
    count = len(rows["prompt_id"].unique()) if len(rows) else 0
    facts = summary.get("facts", {})
    parts = [f"greedy first token, {facts.get('prompt_set')} ({count} prompts)"]
    if "reference_median_top1_prob" in facts:
        parts.append(f"reference distributions: median top-1 probability {facts['reference_median_top1_prob']:.3f}, "
                     f"median top-1/top-2 gap {facts['reference_median_gap']:.3f} nats, "
                     f"{facts['reference_top1_prob_at_least_0.3']:.0%} of prompts at top-1 >= 0.3")
    short = {"argmax agree": "agree", "flips beyond tie gap": "wide flips"}
    if facts.get("continue_tokens"):
        short[f"identical {facts['continue_tokens']}-token continuations"] = "same continuations"
        short[f"diverged outside top-{CONTINUE_TOP_K}"] = f"outside top-{CONTINUE_TOP_K}"
    parts.append(Table(headers, table, short, _short_labels(r["comparison"] for r in summary.get("summary_rows", [])),
                       "note", legend=f"{LABEL_LEGEND}; agree: the same argmax as the reference; wide flips: flips "
                                      f"beyond the tie gap"))
    flips = summary.get("disagreements", [])
    if flips:
        parts.append("disagreements (reference top-1 vs backend top-1; gap = reference top-1 minus top-2 logprob):")
        parts.append(Table(
            ["prompt", "backend", "reference token", "ref logprob", "backend token", "logprob", "ref gap", "near tie"],
            [[f["prompt_id"], f["backend"], repr(f["ref_token"]), _fmt(f["ref_logprob"], "f4"),
              MISSING if f["token"] is None else repr(f["token"]), _fmt(f["logprob"], "f4"), _fmt(f["ref_gap"], "f4"),
              MISSING if f["near_tie"] is None else "yes" if f["near_tie"] else "no"] for f in flips],
            {"reference token": "ref token", "backend token": "token"}))
    return parts


def _render_drift(summary: dict, rows: pd.DataFrame) -> list[str | Table]:
    """One line per backend and layer: rel-L2 beside the band's largest at that layer."""
    table = []
    for _, r in rows.iterrows():
        if r["comparison"].startswith("noise band:"):
            continue
        layer = r.get("layer")
        table.append([r["backend"], MISSING if _missing(layer) else int(layer), _cell(r, "cosine", "cos"),
                      _cell(r, "rel_l2", "sci"), _cell(r, "band_max_rel_l2", "sci"), _cell(r, "max_abs", "sci"),
                      r["verdict"], r.get("note") or ""])
    headers = ["backend", "layer", "cosine", "rel L2 (exact)", "band max rel L2", "max abs", "verdict", "note"]
    return [(f"per-layer hidden-state drift, {summary['facts'].get('tokens')} tokens, "
             f"{summary['facts'].get('layers')} layers, band of {summary['facts'].get('band_size')} variants + rerun"),
            Table(headers, table, {"rel L2 (exact)": "rel L2", "band max rel L2": "band max"}, note="note",
                  optional=("cosine", "max abs")), *diagnosis_parts(summary["facts"])]


def _render_sweep(summary: dict, rows: pd.DataFrame) -> list[str | Table]:
    """Distance per length and row (`!` out of the band, `?` a band that could not judge), then each
    judged row's onset."""
    facts = summary.get("facts", {})
    names = list(dict.fromkeys(rows["backend"]))
    marks = {True: " !", False: ""}
    positions = facts.get("statistic") == "positions"
    table = []
    for tokens, group in rows.groupby("tokens", sort=True):
        # a row measured over the first bin only (the sweep's rerun) shows `-` past it, not a measured NaN
        cells = {r["backend"]: _fmt(r["distance"], "sci",
                                    not str(r.get("note") or "").startswith("measured over the first"))
                 + (f" ({float(r['exceed']):.0%})" if positions and not _missing(r.get("exceed")) else "")
                 + ("?" if r["verdict"] == INCONCLUSIVE else marks.get(r["out"], "")) for _, r in group.iterrows()}
        first = group.iloc[0]
        table.append([str(tokens), _fmt(first["band_max"], "sci"), _fmt(first["limit"], "sci")]
                     + [cells.get(name, MISSING) for name in names])
    onsets = summary.get("onsets", {})
    verdicts = [[name, str(o["onset"]) if o.get("onset") else MISSING, "yes" if o.get("stays_out") else
                 ("no" if o.get("onset") else MISSING), _fmt(o.get("max_distance"), "sci"), o["verdict"]]
                for name, o in onsets.items()]
    source = facts.get("source", "in process")
    if positions:
        title = (f"length sweep, {source}: one forward over {facts['lengths'][-1]} tokens, every position binned by "
                 f"prompt length; mean KL(reference || row) over each bin's positions (share of them beyond the band; "
                 f"! out of the band, ? the band could not judge)")
        headers = ["tokens", "band max mean KL", "limit beyond"]
    else:
        title = (f"length sweep, {source}: mean |dlogprob| over the reference's top-{facts.get('k')} tokens, median "
                 f"over the last {facts.get('window', 1)} positions of each prompt length (! out of the band, ? the "
                 f"band could not judge)")
        headers = ["tokens", "band max", "limit"]
    if positions:
        table = [line[:2] + [f"{float(line[2]):.0%}" if line[2] not in (MISSING, "nan") else line[2]] + line[3:]
                 for line in table]
    # one row per band statistic and backend, one column per length: a length reads down its column
    lengths = [line[0] for line in table]
    by_row = [[name, *(line[i] for line in table)] for i, name in enumerate([*headers[1:], *names], start=1)]
    return [title, Table(["row", *lengths], by_row, key=1),
            Table(["row", "onset (tokens)", "stays out", "max distance", "verdict"], verdicts),
            *position_lines([(name, o["diagnosis"]) for name, o in onsets.items() if o.get("diagnosis")])]


def _render_tasks(summary: dict, rows: pd.DataFrame) -> list[str | Table]:
    """Per task and candidate: the accuracies, the paired table, McNemar's p, the bootstrap interval, the
    control's difference, the detectable drop and the verdict (accuracies and differences in points)."""
    facts = summary.get("facts", {})

    def pts(value) -> str:
        return MISSING if _missing(value) else f"{100 * value:+.2f}" if value < 0 or value > 0 else "0.00"

    table = []
    for _, r in rows.iterrows():
        if isinstance(r.get("fault"), str) and r.get("fault"):  # a candidate whose server gave no answers
            table.append([r["task"], r["candidate"]] + [MISSING] * 10 + [r["verdict"], r.get("reason") or ""])
            continue
        needed = r.get("needed_questions")
        table.append([r["task"], r["candidate"], str(int(r["n"])), f"{100 * r['reference_accuracy']:.2f}",
                      f"{100 * r['candidate_accuracy']:.2f}", pts(r["difference"]),
                      f"[{pts(r['interval_low'])}, {pts(r['interval_high'])}]",
                      f"{int(r['table_only_reference'])} / {int(r['table_only_candidate'])}",
                      f"{r['p_one_sided_drop']:.3g}", pts(r.get("control_difference")),
                      MISSING if math.isinf(r["detectable_drop"]) else f"{100 * r['detectable_drop']:.2f}",
                      MISSING if _missing(needed) else str(int(needed)), r["verdict"], r.get("reason") or ""])
    headers = ["task", "candidate", "questions", "ref acc %", "cand acc %", "difference (points)", "95% interval",
               "only ref / only cand right", "McNemar p (drop)", "control difference", "detectable drop",
               "questions needed", "verdict", "reason"]
    title = (f"task accuracy, paired question by question ({facts.get('source', 'endpoints')}; control: "
             f"{facts.get('control') or 'none'})")
    short = {"questions": "n", "difference (points)": "difference", "only ref / only cand right": "only ref/cand",
             "McNemar p (drop)": "p (drop)", "control difference": "control", "detectable drop": "detectable",
             "questions needed": "needed"}
    optional = ("only ref / only cand right", "questions needed", "control difference", "McNemar p (drop)")
    return [title, Table(headers, table, short, note="reason", optional=optional, key=2)] \
        + [f"warning: {w}" for w in summary.get("warnings", [])]


RENDERERS = {"layer0": _render_layer0, "logits": _render_logits, "firsttoken": _render_firsttoken,
             "drift": _render_drift, "sweep": _render_sweep, "tasks": _render_tasks}


# Reports that carry their printed table.
TABLE_COMMANDS = ("union-stats", "bench", "bench-model", "capture-indices", "selftest", "selftest-rates",
                  "selftest-power", "kernel-check", "plan", "backends")


FORMATS = ("text", "md", "wide", "json")  # --format: a terminal's 120 columns, markdown document, every column, JSON


def render(summary: dict, rows: pd.DataFrame, form: str = "text") -> str:
    """The tables of a record in `form` (one of FORMATS), then the gate rule and the verdict (records of
    TABLE_COMMANDS: the table they printed). ValueError naming the field when the record lacks one its command
    needs, or naming --format when `form` is none of FORMATS."""
    if form not in FORMATS:
        raise ValueError(f"--format must be one of {', '.join(FORMATS)}, got {form!r}")
    command = summary.get("command")
    if form == "json":
        return render_json(summary, rows)
    if command in TABLE_COMMANDS and isinstance(summary.get("table"), str):
        return summary["table"] + ("\n" if form == "md" else "")
    if command not in RENDERERS:
        raise ValueError(f"record of unknown command {command!r}; expected one of "
                         f"{', '.join(list(RENDERERS) + list(TABLE_COMMANDS))}")
    check_record(summary, rows)
    try:
        parts = RENDERERS[command](summary, rows) + engine_call_parts(summary.get("facts", {}))
        if isinstance(summary.get("rehearsal"), dict):  # a rank rehearsal: its measurements, no verdict
            from glmcheck.records.rehearsal_table import rehearsal_parts

            parts = rehearsal_parts(summary["rehearsal"]) + parts
    except (KeyError, TypeError, AttributeError) as err:
        raise ValueError(f"{command} record lacks what its tables need ({type(err).__name__}: {err})") from None
    facts = summary.get("facts", {})
    if form == "text":
        return render_text(parts, facts.get("gate"), summary.get("verdict"))
    texts = [p.markdown() if isinstance(p, Table) else p for p in parts]
    lines = [f"gate: {facts['gate']}" if "gate" in facts else "", f"verdict: {summary.get('verdict')}"]
    if form == "md":
        model = summary.get("model", {})
        head = [f"# glmcheck {command}", "",
                (f"- model: {model_name(model)} (config {model.get('config_hash')}), "
                 f"tp {summary.get('options', {}).get('tp')}, exact {summary.get('options', {}).get('exact')}, "
                 f"baseline {summary.get('options', {}).get('baseline')}"),
                f"- environment: {_env_line(summary.get('environment', {}))}", ""]
        return "\n".join(head) + "\n\n".join(texts) + "\n\n" + "\n".join(x for x in lines if x) + "\n"
    return "\n\n".join(texts) + "\n" + "\n".join(x for x in lines if x)


def model_name(model: dict) -> str | None:
    """The model a record's `model` entry names: the trained model (`trained`; `reference` in records written
    before that name), else the checkpoint, else the preset."""
    return model.get("trained") or model.get("reference") or model.get("checkpoint") or model.get("preset")


def _env_line(env: dict) -> str:
    keys = ("glmcheck_version", "git_sha", "torch_version", "triton_version", "transformers_version", "gpu_name")
    return ", ".join(f"{k}={env.get(k)}" for k in keys if k in env)
