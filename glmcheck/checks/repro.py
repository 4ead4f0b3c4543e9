"""A minimal repro of a failing kernel call: the fewest tokens and heads that still FAIL, with a standalone script.

`minimise(call, kernel)` judges the kernel on the whole call as layer0 judges a forward (`diagnosis_calls`: the exact
output in fp64, REPRO_BAND ideal kernels on the same call, rel-L2, largest per-token rel-L2, scale and temperature
bias), then cuts it while it still FAILS by at least `keep` times its gate (the smaller of KEEP and half the whole
call's margin, at least 1) and the band on the cut still judges (each ideal kernel within the others' gate):

1. heads: the worst alone, the worst two, then delta debugging (ddmin) over the heads;
2. tokens: the shortest prefix that fails (binary search: a fault tied to a position keeps its place), the worst
   1, 2, 4, 8 tokens (in their order), then ddmin over what is left;
3. the heads again, then the KV rows: only those the kept tokens name (indices renumbered), when it still fails.

A cut token keeps its KV rows and its order; its place in the call is its rank among the kept tokens. At most
MAX_TRIALS judgements. `write_repro` saves the cut call (call.safetensors: q, kv, indices, topk_length; the limits the
band gave in its metadata) and the script (`repro_script`), then runs the script's check on the kernel once.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import io
import json
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from safetensors.torch import save_file

from glmcheck.backends.registry import backend_source, get_backend
from glmcheck.checks.band import BIAS_SIGMAS, FAIL, Gate, band_from_rows
from glmcheck.checks.diagnosis_calls import KernelFn, LayerCall, band_outputs, judge_outputs, sample_rows
from glmcheck.checks.diagnosis_structure import ErrorField
from glmcheck.checks.metrics import TEMPER_STEP
from glmcheck.checks.repro_script import script_text

REPRO_BAND = 8  # ideal kernels beside a cut call: a larger band than the checks', as a cut call is small
KEEP = 4.0  # a cut must still fail by this many times its gate (or half the whole call's margin, when smaller)
MAX_TRIALS = 40


@dataclass
class Trial:
    """The kernel judged on one (cut) call: FAIL or not (a band that cannot judge it, or whose own variants fail
    beside the others, is no FAIL), its margin, the limits and the row's statistics."""

    fails: bool
    margin: float
    limits: dict
    stats: dict
    field: ErrorField | None = None


def judge(call: LayerCall, kernel: KernelFn, gate: Gate, kv_cache_dtype: str | None = None,
          with_field: bool = False) -> Trial:
    """`kernel` on `call` beside REPRO_BAND ideal kernels (module docstring)."""
    exact = call.exact()
    direction = call.temperature_direction(exact)
    try:
        output = call.run(kernel)
    except Exception as err:  # noqa: BLE001 - a kernel that raises on a cut: that cut does not show the FAIL
        return Trial(False, math.nan, {}, {"raised": f"{type(err).__name__}: {err}"})
    half = REPRO_BAND // 2  # within the first half's gate, the whole band's (wider) passes it too: not a FAIL
    outputs = band_outputs(call, half, kv_cache_dtype)
    if not with_field and judge_outputs(exact, direction, outputs, output, gate)[1].verdict != FAIL:
        return Trial(False, math.nan, {}, {})
    outputs += band_outputs(call, REPRO_BAND - half, kv_cache_dtype, first=half)
    band, row = judge_outputs(exact, direction, outputs, output, gate)
    samples = sample_rows(exact, direction, outputs)
    stable = all(gate.verdict(samples[k].stats(), band_from_rows(samples[:k] + samples[k + 1:], []))[0] != FAIL
                 for k in range(1, len(samples)))
    limits = {stat: gate.ratio * band.summary(stat)[2] for stat in ("rel_l2", "token_max_rel_l2")}
    limits |= {stat: [band.summary(stat)[0], band.summary(stat)[2]] for stat in ("scale_bias", "temperature_bias")}
    return Trial(row.verdict == FAIL and stable, float(row.extra.get("margin", math.nan)), limits,
                 {**row.stats(), "rel_l2": row.rel_l2}, ErrorField.of(exact, output, outputs) if with_field else None)


def ddmin(items: list[int], fails, budget: list[int]) -> list[int]:
    """The smallest sub-list of `items` (order kept) that `fails(sub)` found still failing, by delta debugging; stops
    when `budget[0]` (trials left) runs out."""
    parts = 2
    while len(items) >= 2 and budget[0] > 0:
        size = math.ceil(len(items) / parts)
        chunks = [items[i:i + size] for i in range(0, len(items), size)]
        for chunk in chunks:
            if budget[0] > 0 and fails(chunk):
                items, parts = chunk, 2
                break
        else:
            for chunk in chunks if parts > 2 else []:
                rest = [x for x in items if x not in chunk]
                if budget[0] > 0 and fails(rest):
                    items, parts = rest, max(parts - 1, 2)
                    break
            else:
                if parts >= len(items):
                    break
                parts = min(len(items), 2 * parts)
    return items


def compact_rows(call: LayerCall) -> LayerCall:
    """The call with only the KV rows its tokens name, the indices renumbered (unnamed slots -1)."""
    valid = call.valid()
    rows = torch.unique(call.indices[valid].long())
    renumber = torch.full((call.kv.shape[0],), -1, dtype=torch.int32, device=call.kv.device)
    renumber[rows] = torch.arange(rows.numel(), dtype=torch.int32, device=call.kv.device)
    indices = torch.where(valid, renumber[call.indices.long().clamp(0, call.kv.shape[0] - 1)], -1).to(torch.int32)
    return replace(call, kv=call.kv[rows].contiguous(), indices=indices.contiguous(), lengths=None)


@dataclass
class Cut:
    """A minimised call: the call, the original tokens and heads it keeps, whether its KV rows were compacted, the
    last failing trial and the trials spent."""

    call: LayerCall
    tokens: list[int]
    heads: list[int]
    compact: bool
    trial: Trial
    trials: int
    first: Trial


def minimise(call: LayerCall, kernel: KernelFn, gate: Gate = Gate(), kv_cache_dtype: str | None = None,
             max_trials: int = MAX_TRIALS) -> Cut | None:
    """The call cut to the fewest tokens and heads that still FAIL (module docstring); None when the whole call does
    not FAIL beside the repro's band."""
    first = judge(call, kernel, gate, kv_cache_dtype, with_field=True)
    if not first.fails:
        return None
    keep = max(1.0, min(KEEP, first.margin / 2))
    budget, best = [max_trials - 1], {}

    def fails(tokens: list[int], heads: list[int], compact: bool = False) -> bool:
        budget[0] -= 1
        sub = call.subset(torch.tensor(tokens), torch.tensor(heads))
        trial = judge(compact_rows(sub) if compact else sub, kernel, gate, kv_cache_dtype)
        good = trial.fails and trial.margin >= keep
        if good:
            best.update(tokens=tokens, heads=heads, trial=trial, compact=compact)
        return good

    tokens, heads = list(range(call.tokens)), list(range(call.heads))
    head_order = first.field.heads().ratios().argsort(descending=True).tolist()
    token_order = first.field.tokens().excess().argsort(descending=True).tolist()
    best.update(tokens=tokens, heads=heads, trial=first, compact=False)

    def cut_heads(heads: list[int]) -> list[int]:
        for pick in ([head_order[0]], sorted(head_order[:2])):
            if len(pick) < len(heads) and set(pick) <= set(heads) and fails(tokens, pick):
                return pick
        return ddmin(heads, lambda sub: fails(tokens, sub), budget)

    heads = cut_heads(heads)
    low, high = 1, len(tokens)
    while low < high and budget[0] > 0:  # the shortest failing prefix
        middle = (low + high) // 2
        if fails(tokens[:middle], heads):
            high = middle
        else:
            low = middle + 1
    tokens = tokens[:high]
    for count in (1, 2, 4, 8):
        pick = sorted([t for t in token_order if t < len(tokens)][:count])
        if count < len(tokens) and fails(pick, heads):
            tokens = pick
            break
    tokens = ddmin(tokens, lambda sub: fails(sub, heads), budget)
    heads = cut_heads(heads) if len(heads) > 1 else heads
    tokens, heads = best["tokens"], best["heads"]
    if budget[0] > 0:
        fails(tokens, heads, compact=True)
    cut = call.subset(torch.tensor(best["tokens"]), torch.tensor(best["heads"]))
    return Cut(compact_rows(cut) if best["compact"] else cut, best["tokens"], best["heads"], best["compact"],
               best["trial"], max_trials - budget[0], first)


def kernel_spec(name: str) -> str | None:
    """`name` as the script's --kernel names it: a built-in or entry-point name as it is, a `--backends NAME=TARGET`
    plug-in as NAME=TARGET, a function registered from an importable module as NAME=module:function; None when the
    function cannot be imported by name (a closure)."""
    source = backend_source(name)
    if source.startswith("--backends "):
        return f"{name}={source[len('--backends '):]}"
    if source == "built in" or source.startswith("entry point"):
        return name
    fn = getattr(get_backend(name).fn, "func", get_backend(name).fn)
    module = inspect.getmodule(fn)
    if module is not None and getattr(module, getattr(fn, "__qualname__", ""), None) is fn:
        return f"{name}={module.__name__}:{fn.__qualname__}"
    return None


def _folder(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "kernel"


def run_script(path: Path, kernel: KernelFn, device: str) -> int:
    """The written script's check, run here on `kernel` (its exit code: 1 reproduces, 0 not; what it prints is
    dropped)."""
    found = importlib.util.spec_from_file_location(f"glmcheck_repro_{_folder(path.parent.name)}", path)
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    with contextlib.redirect_stdout(io.StringIO()):
        return module.check(kernel, device)


def write_repro(call: LayerCall, backend: str, directory: Path, *, options=None, gate: Gate = Gate(),
                hints: dict | None = None, what: str = "") -> dict:
    """Minimise `backend`'s failing `call` and write it under directory/<backend>/ (module docstring); the record's
    entry: where, how small, whether the script reproduces it here."""
    from glmcheck import __version__

    kv_dtype = getattr(options, "kv_cache_dtype", None)
    kernel = get_backend(backend, deterministic=getattr(options, "deterministic", False), kv_cache_dtype=kv_dtype)
    entry = {"row": what, "backend": backend, "of": [call.tokens, call.heads]}
    cut = minimise(call, kernel, gate, kv_dtype)
    if cut is None:
        return entry | {"written": False, "why": f"the call alone does not FAIL beside a band of {REPRO_BAND}"}
    folder = Path(directory) / _folder(backend)
    folder.mkdir(parents=True, exist_ok=True)
    c = cut.call
    tensors = {"q": c.q.contiguous().cpu(), "kv": c.kv.contiguous().cpu(), "indices": c.indices.contiguous().cpu()}
    if c.lengths is not None:
        tensors["topk_length"] = c.lengths.contiguous().cpu()
    meta = {"sm_scale": c.sm_scale, "d_v": c.d_v, "limits": cut.trial.limits, "bias_sigmas": BIAS_SIGMAS,
            "temperature_step": TEMPER_STEP, "tokens": cut.tokens, "heads": cut.heads, "kv_rows_compacted": cut.compact,
            "row": what, "backend": backend}
    save_file(tensors, str(folder / "call.safetensors"), metadata={"repro": json.dumps(meta)})
    spec = kernel_spec(backend)
    origin = f"tokens {_ranges(cut.tokens)}, heads {_ranges(cut.heads)} of the failing call" + \
        ("; KV rows renumbered" if cut.compact else "")
    script = folder / "repro.py"
    script.write_text(script_text(what=what or backend, kernel=spec, tokens=len(cut.tokens), of_tokens=call.tokens,
                                  heads=len(cut.heads), of_heads=call.heads, origin=origin, version=__version__))
    code = run_script(script, kernel, str(call.q.device))
    return entry | {"written": True, "script": str(script), "tokens": len(cut.tokens), "heads": len(cut.heads),
                    "kept_tokens": cut.tokens[:64], "kept_heads": cut.heads, "kernel": spec, "trials": cut.trials,
                    "margin": cut.trial.margin, "reproduces": code == 1}


def _ranges(values: list[int]) -> str:
    out, start = [], None
    for i, v in enumerate(values):
        if start is None:
            start = v
        if i + 1 == len(values) or values[i + 1] != v + 1:
            out.append(str(start) if start == v else f"{start}-{v}")
            start = None
    return ", ".join(out[:8]) + (", ..." if len(out) > 8 else "")
