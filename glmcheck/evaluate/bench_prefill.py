"""`bench_model`: whole-prefill latency per backend on a model (`glmcheck.bench.model`), each row gated against
the reference first, as a `Report` whose render is the table `glmcheck bench --model` prints.

Light module (no torch at import): the library is imported when the bench runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from glmcheck.evaluate.report import Report

MODEL_INDICES = ("model", "calibrated")


def _lengths(tokens: str | Sequence[int]) -> list[int]:
    return [int(t) for t in tokens.split(",") if t.strip()] if isinstance(tokens, str) else [int(t) for t in tokens]


def bench_model(model: str, *, layers: int | None = None, experts: int | None = None, tp: int = 1,
                tokens: str | Sequence[int] = "2048,4096,8192", backends: str | None = None,
                indices: str | None = None, kv_cache_dtype: str | None = None, quiet: bool = False,
                warn: Callable[[str], None] | None = None) -> Report:
    """Prefill latency of `model` (a preset, `layers` / `experts` overriding its own) at each of `tokens` for each
    row of `backends` (NAME[+len][+rebuild], comma-separated; default: FlashMLA+len when present, per-token, each
    legal union reused and rebuilt, hf_sdpa), `tp`-way head slices run one after another; `indices` model (the
    indexer's own top-k, default) or calibrated (replaced for timing); `kv_cache_dtype="fp8_e4m3"` runs every row
    over the FP8 pool. `warn(line)` hears each backend warning as it arises (they are also the Report's warnings).
    ValueError (one line naming the flag) without CUDA or for a bad option. Verdict PASS when every row passed
    its gate, else FAIL; the table printed holds the model, its indices and the layer schedule above the timings."""
    import torch
    from tqdm import tqdm

    from glmcheck.backends.choice import default_backends
    from glmcheck.backends.forms import active
    from glmcheck.backends.validation import validate_backends
    from glmcheck.bench.model import bench_prefill, default_rows, parse_rows, weighting_schedule
    from glmcheck.bench.tables import render_model_table
    from glmcheck.checks.band import FAIL, PASS
    from glmcheck.checks.runner import SwapOptions
    from glmcheck.data.indices import calibrated_selector
    from glmcheck.data.model_prompts import model_prompt, prompt_source
    from glmcheck.evaluate.kernel_bench import require_gpu
    from glmcheck.evaluate.report import Report
    from glmcheck.kernels import legal_groups
    from glmcheck.model.load import ModelSpec, config_of, load_model

    require_gpu()
    indices = indices or "model"
    if indices not in MODEL_INDICES:
        raise ValueError(f"--indices with --model takes one of {', '.join(MODEL_INDICES)} (calibrated: the "
                         f"indexer's top-k replaced for timing runs), got {indices!r}")
    spec = ModelSpec(model, None, layers, experts)
    device = torch.device("cuda")
    lengths = _lengths(tokens)
    config = config_of(spec, layer0_only=True)
    heads = config.num_attention_heads // tp
    latent = (config.kv_lora_rank, config.qk_rope_head_dim)
    flash = "flashmla_sparse" in default_backends(device, heads, latent)
    fp8 = "fp8_e4m3" if kv_cache_dtype == "fp8_e4m3" else None
    rows = parse_rows(backends) if backends else default_rows(legal_groups(heads), flash, fp8=fp8 is not None)
    warnings = list(validate_backends(list(dict.fromkeys(r.backend for r in rows)), device=device,
                                      heads=config.num_attention_heads, tp=tp, latent_dims=latent,
                                      kv_cache_dtype=fp8))
    for warning in warnings if warn is not None else ():
        warn(warning)
    loaded = load_model(spec, device)
    options = SwapOptions(tp=tp, selector=calibrated_selector() if indices == "calibrated" else None,
                          kv_cache_dtype=fp8)
    with tqdm(total=len(lengths) * len(rows), desc="prefill", disable=quiet, leave=False) as bar:
        timings = bench_prefill(loaded, lengths, rows, options, progress=bar,
                                prompt=lambda n, key: model_prompt(spec, loaded.config.vocab_size, n, key, device))
    schedule = weighting_schedule(spec)
    table = render_model_table(timings, tp, schedule.count("full"), schedule.count("shared"))
    ran = config_of(spec).indexer_types
    preface = [f"model: {spec.describe()}, tp {tp} ({heads} heads per rank slice, run one after another); indices: "
               + ("calibrated (every indexer's top-k replaced by calibrated indices for timing)"
                  if indices == "calibrated" else "the model's own indexer") + f"; prompts: {prompt_source(spec)}",
               (f"schedule: each layer kind's mean over the {len(ran)} layers that ran ({ran.count('full')} full, "
                f"{ran.count('shared')} shared), weighted over the model's {len(schedule)} "
                f"({schedule.count('full')} full, {schedule.count('shared')} shared indexer layers)")]
    rows_out = [dataclasses.asdict(t) for t in timings]
    return Report("bench-model", PASS if all(t.passed for t in timings) else FAIL, rows_out, {},
                  spec.describe(), {"tp": tp, "tokens": lengths, "backends": backends, "indices": indices,
                                    "kv_cache_dtype": kv_cache_dtype, **active().record(device.type)},
                  warnings=warnings,
                  extra={"model": spec.describe(), "tp": tp, "indices": indices, "kv_cache_dtype": kv_cache_dtype,
                         "table": "\n".join([*preface, table])})
