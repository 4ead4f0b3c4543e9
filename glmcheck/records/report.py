"""Render a run record (summary + rows) as the tables the CLI prints; `glmcheck report` reuses it.

One rendering path for a fresh run and a re-read record, so the two always agree.
"""

from __future__ import annotations

import math

import pandas as pd

from glmcheck.records.tables import fmt_cosine, fmt_sci, markdown_table


def _fmt(value, kind: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "nan" if kind != "text" else "-"
    if kind == "cos":
        return fmt_cosine(float(value))
    if kind == "sci":
        return fmt_sci(float(value))
    if kind == "f4":
        return f"{float(value):.4f}"
    return str(value)


def _comparison_table(rows: pd.DataFrame, with_argmax: bool) -> str:
    headers = ["comparison", "cosine", "rel L2", "max abs"] + (["argmax"] if with_argmax else []) + ["verdict", "note"]
    table = []
    for _, r in rows.iterrows():
        line = [r["comparison"], _fmt(r["cosine"], "cos"), _fmt(r["rel_l2"], "sci"), _fmt(r["max_abs"], "sci")]
        if with_argmax:
            same = r.get("argmax_same")
            line.append("-" if same is None or (isinstance(same, float) and math.isnan(same))
                        else ("same" if bool(same) else "differs"))
        line += [r["verdict"], r.get("note") or ""]
        table.append(line)
    return markdown_table(headers, table)


def _render_layer0(summary: dict, rows: pd.DataFrame) -> list[str]:
    return [f"layer-0 attention output, {summary['facts'].get('tokens')} tokens", _comparison_table(rows, False)]


def _render_logits(summary: dict, rows: pd.DataFrame) -> list[str]:
    parts = []
    for tokens, group in rows.groupby("tokens", sort=False):
        dense = any(group["note"].fillna("").str.contains("dense"))
        parts.append(f"final-position logits, {tokens} tokens" + (" (dense attention applied)" if dense else ""))
        parts.append(_comparison_table(group, True))
    return parts


def _render_firsttoken(summary: dict, rows: pd.DataFrame) -> list[str]:
    table = [[r["comparison"], f"{r['agree']}/{r['prompts']}", _fmt(r["mean_dlogprob"], "sci"),
              _fmt(r["max_dlogprob"], "sci"), str(r["wide_flips"]), r["verdict"]]
             + ([str(r["identical_continuations"])] if "identical_continuations" in r else [])
             for r in summary.get("summary_rows", [])]
    headers = ["comparison", "argmax agree", "mean |dlogprob|", "max |dlogprob|", "flips beyond tie gap", "verdict"]
    if summary.get("facts", {}).get("continue_tokens"):
        headers.append(f"identical {summary['facts']['continue_tokens']}-token continuations")
    parts = [f"greedy first token, {summary['facts'].get('prompt_set')} ({len(rows['prompt_id'].unique()) if len(rows) else 0} prompts)",
             markdown_table(headers, table)]
    flips = summary.get("disagreements", [])
    if flips:
        parts.append("disagreements (reference top-1 vs backend top-1; gap = reference top-1 minus top-2 logprob):")
        parts.append(markdown_table(
            ["prompt", "backend", "reference token", "ref logprob", "backend token", "logprob", "ref gap", "near tie"],
            [[f["prompt_id"], f["backend"], repr(f["ref_token"]), _fmt(f["ref_logprob"], "f4"), repr(f["token"]),
              _fmt(f["logprob"], "f4"), _fmt(f["ref_gap"], "f4"), "yes" if f["near_tie"] else "no"] for f in flips]))
    return parts


def _render_drift(summary: dict, rows: pd.DataFrame) -> list[str]:
    """One line per backend and layer: rel-L2 beside the control and floor bands."""
    table = []
    for _, r in rows.iterrows():
        if r["comparison"].startswith(("control", "floor")):
            continue
        layer = r.get("layer")
        table.append([r["backend"], "-" if layer is None or (isinstance(layer, float) and math.isnan(layer))
                      else int(layer), _fmt(r["cosine"], "cos"), _fmt(r["rel_l2"], "sci"),
                      _fmt(r.get("control_rel_l2"), "sci"), _fmt(r.get("floor_rel_l2"), "sci"),
                      _fmt(r["max_abs"], "sci"), r["verdict"], r.get("note") or ""])
    headers = ["backend", "layer", "cosine", "rel L2", "control rel L2", "floor rel L2", "max abs", "verdict", "note"]
    return [f"per-layer hidden-state drift, {summary['facts'].get('tokens')} tokens, "
            f"{summary['facts'].get('layers')} layers", markdown_table(headers, table)]


RENDERERS = {"layer0": _render_layer0, "logits": _render_logits, "firsttoken": _render_firsttoken,
             "drift": _render_drift}


TABLE_COMMANDS = ("union-stats", "bench", "bench-model")  # records that carry their printed table


def render(summary: dict, rows: pd.DataFrame, md: bool = False) -> str:
    """The tables of a record, then the gate rule and the verdict (records of TABLE_COMMANDS: the
    table they printed). ValueError naming the field when the record lacks one its command needs."""
    command = summary.get("command")
    if command in TABLE_COMMANDS and isinstance(summary.get("table"), str):
        return summary["table"] + ("\n" if md else "")
    if command not in RENDERERS:
        raise ValueError(f"record of unknown command {command!r}; expected one of "
                         f"{', '.join(list(RENDERERS) + list(TABLE_COMMANDS))}")
    try:
        parts = RENDERERS[command](summary, rows)
    except (KeyError, TypeError, AttributeError) as err:
        raise ValueError(f"{command} record lacks what its tables need ({type(err).__name__}: {err})") from None
    facts = summary.get("facts", {})
    lines = [f"gate: {facts['gate']}" if "gate" in facts else "", f"verdict: {summary.get('verdict')}"]
    if md:
        model = summary.get("model", {})
        head = [f"# glmcheck {command}", "",
                f"- model: {model.get('checkpoint') or model.get('preset')} (config {model.get('config_hash')}), "
                f"tp {summary.get('options', {}).get('tp')}, reference {summary.get('options', {}).get('reference')}",
                f"- environment: {_env_line(summary.get('environment', {}))}", ""]
        return "\n".join(head) + "\n\n".join(parts) + "\n\n" + "\n".join(x for x in lines if x) + "\n"
    return "\n\n".join(parts) + "\n" + "\n".join(x for x in lines if x)


def _env_line(env: dict) -> str:
    keys = ("glmcheck_version", "git_sha", "torch_version", "triton_version", "transformers_version", "gpu_name")
    return ", ".join(f"{k}={env.get(k)}" for k in keys if k in env)
