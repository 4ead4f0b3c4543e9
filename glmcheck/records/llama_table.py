"""logits' figures beside llama.cpp's `llama-perplexity --kl-divergence` report (docs/checks.md, "logits beside
llama.cpp's KL report"): per row its perplexity, ln(PPL(row) / PPL(ref)) with a 95 % interval, and Δp (the row's
probability of the text's next token minus the reference's, in percent as llama.cpp prints it): mean with a 95 %
interval, 1st / 50th / 99th percentiles. The KL figures (mean, median, p99, p99.9, max, same top) are the position
table's (`glmcheck.records.render`)."""

from __future__ import annotations

import math

import pandas as pd

from glmcheck.records.tables import Table

MISSING = "-"


def _number(value) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def _interval(row, key: str, scale: float = 1.0, digits: str = ".2e", low_digits: str = ".1e") -> str:
    mean, low, high = (_number(row.get(k)) for k in (key, f"{key}_low", f"{key}_high"))
    if key == "dp_mean":
        low, high = (_number(row.get(k)) for k in ("dp_low", "dp_high"))
    if mean is None:
        return MISSING
    if low is None or high is None:
        return f"{mean * scale:{digits}}"
    return f"{mean * scale:{digits}} [{low * scale:{low_digits}}, {high * scale:{low_digits}}]"


def _sci(row, key: str) -> str:
    value = _number(row.get(key))
    return MISSING if value is None else f"{value:.3e}"


def llama_tables(rows: pd.DataFrame, labels: list[str], legend: str) -> list[str | Table]:
    """The titles and tables of llama.cpp's figures for one length's rows: KL (median, p99, p99.9, max, same top;
    the mean is the judged table's), then perplexity and Δp. Nothing when the record has none (an older record, or
    rows from servers)."""
    if "ppl" not in rows or rows["ppl"].isna().all():
        return []
    kl, ppl = [], []
    for _, r in rows.iterrows():
        same = _number(r.get("same_top"))
        kl.append([r["comparison"], *(_sci(r, k) for k in ("kl_p50", "kl_p99", "kl_p999", "kl_max")),
                   MISSING if same is None else f"{same:.1%}"])
        value = _number(r.get("ppl"))
        cuts = [_number(r.get(k)) for k in ("dp_p01", "dp_p50", "dp_p99")]
        ppl.append([r["comparison"], MISSING if value is None else f"{value:.4g}", _interval(r, "ln_ppl_ratio"),
                    _interval(r, "dp_mean", 100, "+.3f", "+.3f"),
                    MISSING if None in cuts else " / ".join(f"{c * 100:+.3f}" for c in cuts)])
    reference = _number(rows["ppl_ref"].dropna().iloc[0]) if rows["ppl_ref"].notna().any() else None
    return [
        "beside llama.cpp's --kl-divergence report: KL(reference || row) in nats",
        Table(["comparison", "median KL", "p99 KL", "p99.9 KL", "max KL", "same top"], kl, {}, labels, legend=legend),
        (f"perplexity of the text (PPL(ref) {'-' if reference is None else f'{reference:.4g}'}) and Δp, the row's "
         f"probability of the text's next token minus the reference's, in %"),
        Table(["comparison", "PPL", "ln(PPL/PPL ref) [95 %]", "mean Δp % [95 %]", "Δp % p1 / p50 / p99"], ppl, {},
              labels, legend=legend)]
