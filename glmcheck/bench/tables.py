"""Tables of kernel-bench results (`glmcheck.bench.kernel`): ms per backend and point, ratios
against FlashMLA+len and per-token, paired-round medians, and the accuracy margin against the
shipped baseline."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from glmcheck.bench.kernel import (
    DEQUANT_SUFFIX,
    EXACT_PATHS,
    LENGTH_SUFFIX,
    TILELANG,
    BenchPoint,
    BenchResult,
    is_exact_path,
)
from glmcheck.bench.model import REBUILD, schedule_ms
from glmcheck.records.tables import markdown_table


def geomean(values: list[float]) -> float:
    """Geometric mean of positive values (NaN for an empty list)."""
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


@dataclass
class BenchTable:
    """Results by (point label, backend)."""

    results: list[BenchResult] = field(default_factory=list)

    def ms(self, point: BenchPoint, backend: str) -> float | None:
        found = self.result(point, backend)
        return None if found is None else found.ms

    def result(self, point: BenchPoint, backend: str) -> BenchResult | None:
        return next((r for r in self.results if r.point == point and r.backend == backend), None)

    def cell(self, point: BenchPoint, backend: str) -> str:
        """ms with 3 decimals; "refused" / "failed" where a peer did not run there; "-" otherwise (absent, or its
        gate failed)."""
        found = self.result(point, backend)
        if found is not None and found.ms is not None:
            return f"{found.ms:.3f}"
        kind = found.note.split(":")[0] if found is not None else ""
        return kind if kind in ("refused", "failed") else "-"


def render_table(results: list[BenchResult]) -> str:
    """Markdown tables: ms per backend, per point; ratios against FlashMLA+len and per-token; the
    paired rounds' median ratios (`render_paired`) when there are any."""
    paired = [r for r in results if r.ratios]
    results = [r for r in results if not r.ratios]
    points = list(dict.fromkeys(r.point for r in results))
    backends = list(dict.fromkeys(r.backend for r in results))
    table = BenchTable(results)
    headers = ["point"] + [f"{b} ms" for b in backends]
    rows = []
    best_vs_flash: dict[int, list[float]] = {}  # heads -> one ratio per point
    for p in points:
        rows.append([p.label] + [table.cell(p, b) for b in backends])
    out = [markdown_table(headers, rows)]
    ratio_rows = []
    exact = [b for b in EXACT_PATHS if b in backends]
    ours = [b for b in backends if b.removesuffix(LENGTH_SUFFIX) in EXACT_PATHS]
    for p in points:
        flash = table.ms(p, "flashmla+len")
        per_token = table.ms(p, "per-token")
        row = [p.label]
        for b in exact:
            ms = table.ms(p, b)
            row.append("-" if ms is None or flash is None else f"{flash / ms:.2f}x")
            row.append("-" if ms is None or per_token is None else f"{per_token / ms:.2f}x")
        best = [table.ms(p, b) for b in ours if table.ms(p, b) is not None]
        best_len = [table.ms(p, b) for b in ours if b.endswith(LENGTH_SUFFIX) and table.ms(p, b) is not None]
        peers = [table.ms(p, b) for b in ("flashmla+len", "flashmla") if table.ms(p, b) is not None]
        row.append(f"{flash / min(best_len):.2f}x" if best_len and flash else "-")
        if best and peers:
            best_vs_flash.setdefault(p.heads, []).append(min(peers) / min(best))
            row.append(f"{min(peers) / min(best):.2f}x")
        else:
            row.append("-")
        ratio_rows.append(row)
    ratio_headers = ["point"] + [f"{b} vs {ref}" for b in exact for ref in ("flash+len", "per-token")]
    ratio_headers += ["best ours+len vs flash+len", "best ours vs best FlashMLA"]
    out.append(markdown_table(ratio_headers, ratio_rows))
    if best_vs_flash:
        out.append(geomean_line(best_vs_flash))
    if TILELANG in backends:
        out.append(render_peers(table, points))
    if "flashmla_kv" in backends:
        out.append(render_fp8(table, points, backends))
    if paired:
        out.append(render_paired(paired))
    return "\n\n".join(out)


def render_fp8(table: BenchTable, points: list[BenchPoint], backends: list[str]) -> str:
    """Over an FP8 KV cache: per point FlashMLA's FP8 kernel (`flashmla_kv`, the engines' pick) against our fastest
    exact path with the pool's dequantisation inside the timed call (+len+deq) and on the pool's values alone
    (+len); ratios > 1: ours faster. Then the geomean of the first ratio per head count."""
    def fastest(names: list[str], point: BenchPoint) -> float | None:
        return min((ms for b in names if (ms := table.ms(point, b)) is not None), default=None)

    def ratio(a: float | None, b: float | None) -> str:
        return "-" if a is None or b is None else f"{a / b:.2f}x"

    with_deq = [b for b in backends if b.endswith(LENGTH_SUFFIX + DEQUANT_SUFFIX)]
    on_values = [b for b in backends if b.endswith(LENGTH_SUFFIX) and b.removesuffix(LENGTH_SUFFIX) in EXACT_PATHS]
    rows, ratios = [], {}
    for p in points:
        kv, deq, values = table.ms(p, "flashmla_kv"), fastest(with_deq, p), fastest(on_values, p)
        if kv is not None and deq is not None:
            ratios.setdefault(p.heads, []).append(kv / deq)
        rows.append([p.label, _ms(kv, 3), _ms(deq, 3), _ms(values, 3), ratio(kv, deq), ratio(kv, values)])
    headers = ["point", "flashmla_kv ms", "best ours+len+deq ms", "best ours+len ms", "flashmla_kv / ours+len+deq",
               "flashmla_kv / ours+len"]
    text = ("FP8 KV cache: FlashMLA's FP8 kernel (flashmla_kv) against our fastest exact path, the pool's "
            "dequantisation in the call (+deq) and not:\n\n" + markdown_table(headers, rows))
    if ratios:
        parts = [f"H={h} {geomean(r):.2f}x over {len(r)} point{'s' if len(r) != 1 else ''}" for h, r in ratios.items()]
        text += "\n\ngeomean of flashmla_kv / best ours+len+deq: " + "; ".join(parts)
    return text


PEERS = ("flashmla+len", "flashmla", TILELANG)


def render_peers(table: BenchTable, points: list[BenchPoint]) -> str:
    """Per point our fastest exact path (build included) against each peer and the best of them (ratios > 1: ours
    faster), the geomean against the best peer per head count, then one line per peer cell that did not run."""
    rows, ratios, notes = [], {}, []
    for p in points:
        ours = [(ms, b) for b in dict.fromkeys(r.backend for r in table.results)
                if is_exact_path(b) and (ms := table.ms(p, b)) is not None]
        best_ms, best = min(ours, default=(None, "-"))
        peers = [ms for b in PEERS if (ms := table.ms(p, b)) is not None]
        row = [p.label, best, _ms(best_ms, 3), table.cell(p, "flashmla+len"), table.cell(p, TILELANG)]
        for peer in [table.ms(p, "flashmla+len"), table.ms(p, TILELANG), min(peers, default=None)]:
            row.append("-" if peer is None or best_ms is None else f"{peer / best_ms:.2f}x")
        if peers and best_ms is not None:
            ratios.setdefault(p.heads, []).append(min(peers) / best_ms)
        rows.append(row)
        found = table.result(p, TILELANG)
        if found is not None and found.ms is None:
            notes.append(f"{TILELANG} at {p.label}: {found.note}")
    headers = ["point", "best ours", "ms", "flashmla+len ms", "tilelang ms", "vs flashmla+len", "vs tilelang",
               "vs best peer"]
    text = ("Our fastest exact path (build included) against the peers (FlashMLA, SGLang's TileLang prefill; > 1: "
            "ours faster):\n\n" + markdown_table(headers, rows))
    if ratios:
        text += "\n\ngeomean of the best peer / best ours: " + "; ".join(
            f"H={h} {geomean(r):.2f}x over {len(r)} point{'s' if len(r) != 1 else ''}" for h, r in ratios.items())
    return text + "".join(f"\n{note}" for note in notes)


def render_paired(paired: list[BenchResult]) -> str:
    """Markdown table of paired rows: per point, each pair's median ratio and its range over the rounds."""
    names = list(dict.fromkeys(r.backend for r in paired))
    points = list(dict.fromkeys(r.point for r in paired))
    cells = {(r.point, r.backend): r.ratios for r in paired}
    rows = []
    for p in points:
        row = [p.label]
        for name in names:
            ratios = sorted(cells.get((p, name), ()))
            row.append(f"{statistics.median(ratios):.3f} ({ratios[0]:.3f}-{ratios[-1]:.3f})" if ratios else "-")
        rows.append(row)
    rounds = max(len(r.ratios) for r in paired)
    return (f"paired rounds (ms of A / ms of B, median and range over up to {rounds} alternating rounds; "
            f"> 1: B faster):\n\n" + markdown_table(["point"] + names, rows))


def geomean_line(ratios_by_heads: dict[int, list[float]]) -> str:
    """One line: the geomean of the best exact path's speed-up per head count, then over all points."""
    def cell(ratios: list[float]) -> str:
        return f"{geomean(ratios):.2f}x over {len(ratios)} point{'s' if len(ratios) != 1 else ''}"

    parts = [f"H={heads} {cell(ratios)}" for heads, ratios in ratios_by_heads.items()]
    if len(ratios_by_heads) > 1:
        parts.append(f"all {cell([r for ratios in ratios_by_heads.values() for r in ratios])}")
    return "geomean speed-up of the best exact path over the faster FlashMLA form: " + "; ".join(parts)


def render_accuracy(results: list[BenchResult], reference: str) -> str:
    """Per point: our worst rel-L2 and FlashMLA's best against the `reference` (e.g. "fp64"), and
    their difference (below 0: ours closer); "" when FlashMLA did not run."""
    rows = []
    for point in dict.fromkeys(r.point for r in results):
        here = [r for r in results if r.point == point and r.rel_l2 is not None and not r.ratios]
        ours = [r.rel_l2 for r in here if r.backend.removesuffix(LENGTH_SUFFIX) in EXACT_PATHS]
        flash = [r.rel_l2 for r in here if r.backend.startswith("flashmla")]
        if ours and flash:
            rows.append([point.label, f"{max(ours):.9e}", f"{min(flash):.9e}", f"{max(ours) - min(flash):+.3e}"])
    if not rows:
        return ""
    return (f"accuracy against the {reference} reference (our worst path, FlashMLA's best form):\n\n"
            + markdown_table(["point", "ours worst rel-L2", "FlashMLA best rel-L2", "ours - FlashMLA"], rows))


def _ms(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render_model_table(timings: list, tp: int, full_layers: int, shared_layers: int,
                       baseline: str = "flashmla_sparse+len") -> str:
    """The model bench's table (`glmcheck.bench.model.PrefillTiming` rows) and, per length, the best
    union with plans reused against the best with a build per layer and against `baseline`, on the
    attention of the whole schedule (`full_layers` full + `shared_layers` shared layers, per rank slice).
    Rows without attention time (hf: one dense masked call over all heads) are shown, not ranked."""
    schedule = {id(t): schedule_ms(t, full_layers, shared_layers, tp) for t in timings}
    base = {t.tokens: schedule[id(t)] for t in timings if t.row == baseline and schedule[id(t)]}
    rows = []
    for t in timings:
        mine = schedule[id(t)]
        versus = "not ranked (dense masked attention)" if t.passed and t.attention_ms is None else \
            "-" if mine is None or t.tokens not in base else f"{base[t.tokens] / mine:.2f}x"
        rows.append([t.row, t.tokens, t.gate, _ms(t.median_ms, 1), _ms(t.attention_ms),
                     _ms(None if t.attention_ms is None else t.attention_ms / tp), _ms(t.full_layer_ms, 3),
                     _ms(t.shared_layer_ms, 3), _ms(mine), versus, t.kernel_calls, t.plan_builds])
    headers = ["backend", "tokens", "gate", "forward ms", "attention ms / forward", "per rank slice",
               "full layer ms", "shared layer ms", (f"schedule attention ms ({full_layers} full + {shared_layers} "
                f"shared, per rank slice)"), f"vs {baseline}", "kernel calls", "plan builds"]
    lines = [markdown_table(headers, rows)]
    for tokens in dict.fromkeys(t.tokens for t in timings):
        unions = [t for t in timings if t.tokens == tokens and ":union" in t.row and schedule[id(t)]]
        reused = [t for t in unions if not t.row.endswith(REBUILD)]
        rebuilt = [t for t in unions if t.row.endswith(REBUILD)]
        if not reused:
            continue
        best = min(reused, key=lambda t: schedule[id(t)])
        text = f"{tokens} tokens: best union with plans reused {best.row} {schedule[id(best)]:.2f} ms"
        if rebuilt:
            best_rebuilt = min(rebuilt, key=lambda t: schedule[id(t)])
            text += (f"; best with a build per layer {best_rebuilt.row} {schedule[id(best_rebuilt)]:.2f} ms "
                     f"({schedule[id(best_rebuilt)] / schedule[id(best)]:.2f}x)")
        if tokens in base:
            text += f"; {baseline} {base[tokens]:.2f} ms ({base[tokens] / schedule[id(best)]:.2f}x)"
        lines.append(text)
    return "\n".join(lines)
