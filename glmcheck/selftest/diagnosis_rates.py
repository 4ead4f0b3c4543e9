"""How often the diagnosis names a planted fault's structure, how often it says anything of a legitimate row, and how
small the repro of each fault is (docs/diagnosis.md, "Measured").

Per seed (on ref-cpu a seed picks the prompt: a window of held-out text), one layer0 run with every planted fault as
a row (the project's, `glmcheck.selftest.faults`, and the structured kinds, `faults_structured`), each wrapping a base
kernel (`band:5` by default: held out of the band, so the interpreter's minutes a forward are not spent), beside the
legitimate rows: the kernel under test's per-token and union paths and the held-out band variants `band:4`, `band:5`.

- **named**: a FAIL fault row whose printed findings (the first MAX_LINES) include one that names its structure
  (`EXPECTED`: the heads, the tokens, the onset, the period, the row range, the window, the output dims, the slot
  change, the scale or the temperature it plants);
- **silent**: a legitimate row diagnosed as if it had failed (the same `diagnose` on its captured output) that gets
  no finding at all;
- **repro**: the fault's layer-0 call cut by `glmcheck.checks.repro`, its script exiting 1 on the fault and 0 on the
  base kernel, and the share of the call's tokens it keeps (at most 1/8 where the fault allows: `CUTTABLE`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from glmcheck.backends.registry import backend_names, get_backend, register_backend
from glmcheck.checks.band import FAIL, Gate
from glmcheck.checks.diagnosis import diagnose
from glmcheck.checks.diagnosis_calls import LayerCall, band_outputs, judge_outputs, record_calls
from glmcheck.checks.diagnosis_text import MAX_LINES
from glmcheck.checks.layer0 import run_layer0
from glmcheck.checks.runner import SwapOptions
from glmcheck.kernels.union import legal_groups
from glmcheck.selftest.faults import FAULTS, STRUCTURAL_FAULTS, late_fault
from glmcheck.selftest.faults_structured import rebased, structured_faults
from glmcheck.selftest.rates import wilson

Predicate = Callable[[list[dict], LayerCall], bool]


def _groups(f: dict) -> list[tuple[str, list]]:
    return [(g["family"], list(g["param"])) for g in f.get("groups", [])]


def _tokens(members: Callable[[LayerCall], set[int]]) -> Predicate:
    return lambda found, call: any(f["kind"] == "tokens" and set(f.get("members", [])) == members(call)
                                   and f.get("count") == len(members(call)) for f in found)


def _group(family: str, param: list) -> Predicate:
    return lambda found, call: any(f["kind"] == "tokens" and (family, param) in _groups(f) for f in found)


def _change(change: str, test: Callable[[list], bool] = lambda p: True) -> Predicate:
    return lambda found, call: any(f["kind"] == "slots" and f["change"] == change and test(f["param"]) for f in found)


def _bias(kind: str, low: float, high: float) -> Predicate:
    return lambda found, call: any(f["kind"] == kind and low <= f["bias"] <= high for f in found)


def _heads(members: list[int]) -> Predicate:
    return lambda found, call: any(f["kind"] == "heads" and f["members"] == members for f in found) or \
        any(f["kind"] == "heads_swapped" and sorted(map(int, f["pairs"])) == members for f in found)


def _any(*predicates: Predicate) -> Predicate:
    return lambda found, call: any(p(found, call) for p in predicates)


def _every(step: int, start: int = 0, need: Callable[[LayerCall], torch.Tensor] | None = None
           ) -> Callable[[LayerCall], set[int]]:
    """The tokens t = start mod step of a call (those `need` allows)."""
    def members(call: LayerCall) -> set[int]:
        tokens = range(start, call.tokens, step)
        allowed = need(call) if need is not None else None
        return {t for t in tokens if allowed is None or bool(allowed[t])}
    return members


def _count(call: LayerCall) -> torch.Tensor:
    return call.valid().sum(dim=1).cpu()


def expected(tokens: int, d_v: int) -> dict[str, Predicate]:
    """What naming each planted fault's structure means (module docstring), at prompts of `tokens` tokens."""
    late = 3 * tokens // 4
    start, bound = 5 * tokens // 8, 1 << max(1, (tokens - 1).bit_length() - 1)
    window, block = max(2, tokens // 4), max(1, d_v // 4)
    return {
        "fault:output_x1.003": _bias("scale", 2e-3, 4e-3),
        "fault:sm_scale_x1.001": _bias("temperature", 5e-4, 1.5e-3),
        "fault:rope_dropped": _change("rope"),
        "fault:neighbour_1in64": _any(_tokens(lambda c: set(range(0, c.tokens - 1, 64))), _change("neighbour")),
        "fault:empty_row0_1in100": _any(_tokens(_every(100, 1, lambda c: _count(c) < c.indices.shape[1])),
                                        _change("row0")),
        "fault:last_slot_dropped": _change("last"),
        "fault:future_row_1in64": _any(_tokens(_every(64)), _change("future_last")),
        "fault:duplicate_row_1in32": _any(_tokens(_every(32, 0, lambda c: _count(c) > 1)), _change("first_twice")),
        "fault:heads_swapped": _heads([0, 1]),
        f"fault:quarter_dropped_from{late}": _any(_group("onset", [late]), _change("every", lambda p: p == [4, 3])),
        "fault:heads_2_5_scaled": _heads([2, 5]),
        "fault:t3mod4_last_dropped": _group("period", [4, 3]),
        f"fault:scaled_from{start}": _group("onset", [start]),
        f"fault:rows_wrap{bound}": _any(_group("index", ["rows_from", bound]), _change("wrap", lambda p: p == [bound])),
        f"fault:window{window}": _any(_group("index", ["distance_from", window]),
                                      _change("far", lambda p: p[0] <= window <= p[1])),
        f"fault:dims{block}-{2 * block}": lambda found, call: any(f["kind"] == "dims" and f.get("range") ==
                                                                 [block, 2 * block] for f in found),
        "fault:temperature_x0.997": _bias("temperature", -4.5e-3, -1.5e-3),
        "fault:full_first_dropped": _any(_group("index", ["full"]), _change("first")),
    }


# Faults whose repro may keep few tokens: not tied to a position of the call (an onset, a window from row 0, the
# rows past a bound of every token), and not a small bias (scale, temperature) whose statistic needs many tokens.
CUTTABLE = ("rope_dropped", "neighbour", "empty_row0", "last_slot", "future_row", "duplicate_row", "heads_swapped",
            "heads_2_5", "t3mod4", "dims", "full_first", "rows_wrap")


def planted(base: str, tokens: int, d_v: int) -> dict[str, tuple[Callable, str]]:
    """Every planted fault on `base`, registered by name (once a process): name -> (kernel, description)."""
    fn = get_backend(base).fn
    faults = {**FAULTS, **STRUCTURAL_FAULTS}
    late_name, late_fn, late_text = late_fault(tokens)
    faults[late_name] = (late_fn, late_text)
    faults = {name: (rebased(kernel, fn), text) for name, (kernel, text) in faults.items()}
    faults |= structured_faults(fn, tokens, d_v)
    known = set(backend_names())
    for name, (kernel, text) in faults.items():
        if name not in known:
            register_backend(name, kernel, f"{text} (on {base})", source="glmcheck.selftest.diagnosis_rates")
    return faults


@dataclass
class Tally:
    """One row of the table over the seeds: a fault (named, FAIL, reproduced, fixed, tokens kept) or a legitimate
    row (silent)."""

    name: str
    legitimate: bool
    runs: int = 0
    fails: int = 0
    named: int = 0
    silent: int = 0
    reproduced: int = 0
    fixed: int = 0
    kept: list[float] = field(default_factory=list)
    said: list[str] = field(default_factory=list)  # a legitimate row's findings, or a fault's unnamed first lines


def measure(seeds: Sequence[int] = range(20), tokens: int = 128, model: str = "ref-cpu", base: str = "band:5",
            repro: bool = True, only: Sequence[str] | None = None, legitimate: Sequence[str] | None = None,
            progress: Callable[[str], None] | None = None, device: str = "cpu") -> list[Tally]:
    """The measurement of the module docstring over `seeds` (`only`: a subset of the faults, `legitimate`: of the
    legitimate rows, by name; on a GPU `base` may be the kernel under test itself)."""
    from glmcheck.data.model_prompts import model_prompt
    from glmcheck.model.load import ModelSpec, load_model

    spec = ModelSpec(preset=model)
    net = load_model(spec, device, layer0_only=True)
    d_v, heads = net.config.kv_lora_rank, net.config.num_attention_heads
    faults = planted(base, tokens, d_v)
    names = [n for n in faults if only is None or n in only]
    legit = list(legitimate) if legitimate is not None else \
        ["triton_sparse_mla"] + [f"triton_sparse_mla:union{g}" for g in legal_groups(heads)] + ["band:4", "band:5"]
    checks = expected(tokens, d_v)
    tallies = {n: Tally(n, False) for n in names} | {n: Tally(n, True) for n in legit}
    for seed in seeds:
        ids = model_prompt(spec, net.config.vocab_size, tokens, seed, device)
        result = run_layer0(net, ids, legit + names)
        call = record_calls(net, ids, "reference", SwapOptions(), layers=1)[0]
        diagnoses = {d["backend"]: d for d in result.facts.get("diagnoses", [])}
        verdicts = {r.backend: r.verdict for r in result.rows if not r.comparison.startswith("noise band:")
                    and "(per-token)" not in r.comparison}
        for name in names:
            tally = tallies[name]
            tally.runs += 1
            if verdicts.get(name) != FAIL:
                continue
            tally.fails += 1
            printed = diagnoses.get(name, {}).get("findings", [])[:MAX_LINES]
            if checks[name](printed, call):
                tally.named += 1
            else:
                tally.said.append(f"seed {seed}: " + " | ".join(f["text"] for f in printed))
            if repro:
                _repro(tally, call, name, base, device)
        _silent(tallies, legit, call, result.tensors())
        if progress is not None:
            progress(f"seed {seed}: {sum(t.named for t in tallies.values() if not t.legitimate)} named so far")
    return list(tallies.values())


def _repro(tally: Tally, call: LayerCall, name: str, base: str, device: str) -> None:
    from glmcheck.checks.repro import run_script, write_repro

    with tempfile.TemporaryDirectory(prefix="glmcheck-repro-") as folder:
        entry = write_repro(call, name, Path(folder), what=name)
        if not entry.get("written"):
            return
        tally.reproduced += bool(entry["reproduces"])
        tally.fixed += run_script(Path(entry["script"]), get_backend(base), device) == 0
        tally.kept.append(entry["tokens"] / call.tokens)


def _silent(tallies: dict[str, Tally], legit: list[str], call: LayerCall, tensors: dict) -> None:
    """Each legitimate row diagnosed as if it had failed: silent when it gets no finding."""
    exact = call.exact()
    direction = call.temperature_direction(exact)
    band = band_outputs(call)
    for name in legit:
        output = tensors[f"latent/{name}"].to(call.q.device, torch.bfloat16)
        band_stats, row = judge_outputs(exact, direction, band, output, Gate())
        found = diagnose(exact, output, band, call=call, stats={**row.stats(), "rel_l2": row.rel_l2},
                         band_stats=band_stats, direction=direction)["findings"]
        tally = tallies[name]
        tally.runs += 1
        tally.fails += row.verdict == FAIL
        tally.silent += not found
        tally.said += [f["text"] for f in found]


def table(tallies: list[Tally]) -> str:
    """Markdown: the faults (FAIL, named with its 95 % Wilson interval, repro reproduced / fixed, tokens kept: median
    and largest share), then the legitimate rows (silent), then the pooled rates."""
    from glmcheck.records.tables import markdown_table

    def rate(k: int, n: int) -> str:
        low, high = wilson(k, n)
        return f"{k}/{n} [{low:.2f}, {high:.2f}]" if n else "-"

    lines = []
    for t in tallies:
        if t.legitimate:
            lines.append([t.name, "legitimate", f"{t.fails}/{t.runs}", "-", rate(t.silent, t.runs), "-", "-"])
            continue
        kept = sorted(t.kept)
        share = f"{kept[len(kept) // 2]:.3f} / {kept[-1]:.3f}" if kept else "-"
        cut = "yes" if any(key in t.name for key in CUTTABLE) else "no"
        lines.append([t.name, "fault", f"{t.fails}/{t.runs}", rate(t.named, t.fails), "-",
                      f"{t.reproduced}/{len(t.kept)} / {t.fixed}/{len(t.kept)}", f"{share} ({cut})"])
    headers = ["row", "kind", "FAIL", "structure named [95 %]", "silent [95 %]", "repro: reproduces / fixed passes",
               "tokens kept: median / largest (1/8 expected)"]
    faults = [t for t in tallies if not t.legitimate]
    legit = [t for t in tallies if t.legitimate]
    named, failed = sum(t.named for t in faults), sum(t.fails for t in faults)
    silent, runs = sum(t.silent for t in legit), sum(t.runs for t in legit)
    cuttable = [k for t in faults if any(key in t.name for key in CUTTABLE) for k in t.kept]
    summary = [f"named: {rate(named, failed)} of the FAIL fault rows",
               f"silent: {rate(silent, runs)} of the legitimate rows",
               (f"repro: {sum(t.reproduced for t in faults)}/{sum(len(t.kept) for t in faults)} reproduce, "
                f"{sum(t.fixed for t in faults)}/{sum(len(t.kept) for t in faults)} pass with the base kernel; "
                f"tokens kept <= 1/8 in {sum(k <= 1 / 8 for k in cuttable)}/{len(cuttable)} repros of the faults that "
                f"allow it")]
    return markdown_table(headers, lines) + "\n\n" + "\n".join(summary)


def worst(tallies: list[Tally], limit: int = 3) -> list[str]:
    """What went unnamed, or what a legitimate row was told, a few lines a row."""
    out = []
    for t in tallies:
        if t.said:
            out += [f"{t.name}: {line}" for line in t.said[:limit]]
    return out

