"""Model-level prefill latency: whole forwards per backend row and prompt length, with the attention's
own time beside them (GPU).

A row is a backend as the harness runs it: `NAME[+len][+rebuild]` (`+len`: topk_length passed;
`+rebuild`: a plan built for every call instead of one per indexer selection). Each (row, length)
first runs one gate forward: an absorbed row's layer-0 latent output must be within GATE_REL_L2 of
the fp32 reference's (layer 0 sees the same inputs under every backend), and a `+rebuild` row's
logits must equal its plans-reused partner's bit for bit; a row that fails is not timed. Then
`repeats` forwards are timed: the whole forward (wall clock, synchronised) and each layer's
attention calls (CUDA events, `glmcheck.model.clock`); medians are reported. The attention of the
model's full schedule is estimated from the layers that ran: each layer kind's mean time weighted
by the preset's count of full and shared indexer layers, per TP rank slice.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from glmcheck.checks import metrics
from glmcheck.checks.runner import BackendRun, SwapOptions, forward_under
from glmcheck.data.prompts import seeded_prompt
from glmcheck.model.swap import HF_BACKENDS

GATE_REL_L2 = 3e-3
LENGTH, REBUILD = "+len", "+rebuild"


@dataclass(frozen=True)
class ModelRow:
    """One backend as the model bench runs it (see module docstring)."""

    backend: str
    topk_length: bool = False
    reuse_plans: bool = True

    @property
    def label(self) -> str:
        return self.backend + (LENGTH if self.topk_length else "") + ("" if self.reuse_plans else REBUILD)

    @property
    def absorbed(self) -> bool:
        return self.backend not in HF_BACKENDS


def parse_rows(text: str) -> list[ModelRow]:
    """Rows from "NAME[+len][+rebuild],..."; ValueError naming --backends for an empty item."""
    rows = []
    for item in (part.strip() for part in text.split(",")):
        name, flags = item, set()
        while name.endswith((LENGTH, REBUILD)):
            flag = LENGTH if name.endswith(LENGTH) else REBUILD
            flags.add(flag)
            name = name[:-len(flag)]
        if not name:
            raise ValueError(f"--backends takes NAME[+len][+rebuild] items separated by commas, got {item!r}")
        rows.append(ModelRow(name, LENGTH in flags, REBUILD not in flags))
    return rows


def default_rows(groups: list[int], flashmla: bool, *, fp8: bool = False) -> list[ModelRow]:
    """FlashMLA+len (when present; over an FP8 KV cache also its FP8 decode kernel, `flashmla_kv`, whose calls
    include writing the pool from the rows, once per layer), our per-token path, each legal union with plans reused
    and with a build per layer (all with topk_length, as serving engines call), and hf_sdpa (not over FP8: it never
    reads the pool)."""
    rows = [ModelRow("flashmla_sparse", True)] if flashmla else []
    if flashmla and fp8:
        rows.append(ModelRow("flashmla_kv", True))
    rows.append(ModelRow("triton_sparse_mla", True))
    for group in groups:
        rows += [ModelRow(f"triton_sparse_mla:union{group}", True),
                 ModelRow(f"triton_sparse_mla:union{group}", True, reuse_plans=False)]
    return rows if fp8 else rows + [ModelRow("hf_sdpa")]


@dataclass(frozen=True)
class PrefillTiming:
    """One row at one length; times are None when the gate failed (`gate` says why)."""

    row: str
    tokens: int
    gate: str
    passed: bool
    median_ms: float | None = None
    attention_ms: float | None = None   # all layers' attention calls of one forward (every rank slice)
    full_layer_ms: float | None = None  # mean attention of one full indexer layer (every rank slice)
    shared_layer_ms: float | None = None
    kernel_calls: int = 0
    plan_builds: int = 0


def _row_options(row: ModelRow, options: SwapOptions) -> SwapOptions:
    return replace(options, topk_length=row.topk_length, reuse_plans=row.reuse_plans)


def _gate(row: ModelRow, run: BackendRun, reference: BackendRun, partner: BackendRun | None) -> tuple[str, bool]:
    if not row.absorbed:
        return "not gated (dense masked attention)", True
    if 0 not in run.captured.latent:
        return "no layer-0 output (backend not called)", False
    rel = metrics.rel_l2(run.captured.latent[0], reference.captured.latent[0])
    if not rel <= GATE_REL_L2:
        return f"layer-0 rel-L2 {rel:.2e} > {GATE_REL_L2:g}", False
    if partner is not None and not torch.equal(run.captured.logits, partner.captured.logits):
        return f"layer-0 rel-L2 {rel:.2e}; logits differ from {row.backend} with plans reused", False
    return f"layer-0 rel-L2 {rel:.2e}" + ("; logits = plans-reused, bitwise" if partner is not None else ""), True


def _timed(model, ids: torch.Tensor, row: ModelRow, options: SwapOptions) -> tuple[float, BackendRun]:
    if ids.device.type == "cuda":
        torch.cuda.synchronize(ids.device)
    start = time.perf_counter()
    run = forward_under(model, ids, row.backend, _row_options(row, options), time_attention=row.absorbed)
    return (time.perf_counter() - start) * 1e3, run


def _kind_means(runs: list[BackendRun], schedule: list[str]) -> tuple[float | None, float | None]:
    """Mean attention ms of one full and one shared layer (per-layer medians over the runs)."""
    layers = sorted(runs[0].attention_ms)
    median = {layer: statistics.median(run.attention_ms[layer] for run in runs) for layer in layers}
    means = []
    for kind in ("full", "shared"):
        times = [median[layer] for layer in layers if schedule[layer] == kind]
        means.append(statistics.fmean(times) if times else None)
    return means[0], means[1]


def _measure(model, ids, row: ModelRow, options: SwapOptions, gate: str, repeats: int) -> PrefillTiming:
    samples = [_timed(model, ids, row, options) for _ in range(repeats)]
    runs = [run for _, run in samples]
    timing = PrefillTiming(row.label, ids.shape[1], gate, True, statistics.median(ms for ms, _ in samples),
                           kernel_calls=sum(runs[-1].calls.values()), plan_builds=sum(runs[-1].plan_builds.values()))
    if not row.absorbed:
        return timing
    full, shared = _kind_means(runs, model.config.indexer_types)
    attention = statistics.median(sum(run.attention_ms.values()) for run in runs)
    return replace(timing, attention_ms=attention, full_layer_ms=full, shared_layer_ms=shared)


def bench_prefill(model, lengths: list[int], rows: list[ModelRow], options: SwapOptions = SwapOptions(),
                  repeats: int = 5, seed: int = 0, progress=None,
                  prompt: Callable[[int, int], torch.Tensor] | None = None) -> list[PrefillTiming]:
    """Gate, then time every row at every length (see module docstring); one warm forward per row first.
    `prompt(tokens, seed)` gives the ids (default: seeded random ids)."""
    results: list[PrefillTiming] = []
    device = next(model.parameters()).device
    for tokens in lengths:
        ids = prompt(tokens, seed + tokens) if prompt else seeded_prompt(model.config.vocab_size, tokens,
                                                                         seed + tokens, device)
        reference = forward_under(model, ids, "reference", options, latent_layers=[0])
        gate_runs: dict[str, BackendRun] = {}
        for row in rows:
            try:
                run = forward_under(model, ids, row.backend, _row_options(row, options), latent_layers=[0])
                partner = gate_runs.get(replace(row, reuse_plans=True).label) if not row.reuse_plans else None
                gate, passed = _gate(row, run, reference, partner)
                gate_runs[row.label] = run
                results.append(_measure(model, ids, row, options, gate, repeats) if passed
                               else PrefillTiming(row.label, tokens, gate, False))
            except torch.OutOfMemoryError:
                torch.cuda.empty_cache()
                results.append(PrefillTiming(row.label, tokens, "out of memory", False))
            if progress is not None:
                progress.update(1)
    return results


def weighting_schedule(spec) -> list[str]:
    """The indexer schedule ("full" / "shared" per layer) the per-kind means are weighted over: a preset's whole
    depth, whatever `--layers` ran (it only truncates the model to fit: GLM-5.2's 21 full and 57 shared layers
    from an 8-layer run), a checkpoint's own layers. `spec`: a `glmcheck.model.load.ModelSpec`."""
    from glmcheck.model.load import config_of

    return list(config_of(replace(spec, layers=None)).indexer_types)


def schedule_ms(timing: PrefillTiming, full_layers: int, shared_layers: int, tp: int) -> float | None:
    """Attention ms of one forward over a schedule of `full_layers` + `shared_layers` layers, per TP rank
    slice, from the row's per-kind means (a model without shared layers weights full ones only)."""
    if timing.full_layer_ms is None:
        return None
    shared = timing.shared_layer_ms if timing.shared_layer_ms is not None else timing.full_layer_ms
    return (full_layers * timing.full_layer_ms + shared_layers * shared) / tp
