"""`memory_plan`: the memory a preset needs per GPU at a TP degree (`glmcheck.model.memory`: weights exact from the
module shapes and the sharding rules, a conservative estimate of one prefill's activations), on the absorbed path and
transformers' dense ones, as a `Report` whose render is the table `glmcheck plan` prints.

Light module (no torch at import): the memory plan is imported when it runs.
"""

from __future__ import annotations

import dataclasses
import textwrap
from typing import TYPE_CHECKING

from glmcheck.evaluate.arguments import check_count, check_experts, check_layers, check_number
from glmcheck.evaluate.options import KV_CACHE_DTYPES
from glmcheck.model.engine_shape import check_engine_options
from glmcheck.process.wording import flag

if TYPE_CHECKING:
    from glmcheck.evaluate.report import Report
    from glmcheck.model.memory import PoolSize

LABELS = {"absorbed": "absorbed (every swapped backend)", "hf_sdpa": "hf_sdpa (dense)", "hf_eager": "hf_eager (dense)"}
WEIGHT_FORMATS = ("bf16", "fp8")


def memory_plan(model: str = "glm-5.2", *, tp: int = 8, layers: int | None = None, experts: int | None = None,
                tokens: int = 4096, gpu_gib: float = 141.0, weights: str = "bf16", calls: str = "prefill",
                pool_rows: int | None = None, requests: int | None = None,
                kv_cache_dtype: str | None = None) -> Report:
    """Per rank: the weights of preset `model` (`layers`, `experts` overriding its own) held as `weights` (bf16, or
    fp8: FP8 weights resident) at TP degree `tp`, one prefill's activations at `tokens` tokens per path, and whether
    they fit a GPU of `gpu_gib` GiB, with the largest layer count and prompt that do. `calls` "serving" adds, on the
    absorbed path (the one the checks call engine-shaped), the paged KV pool those calls hold through a forward on a
    GPU (`engine_pool.serving_pool`: `pool_rows` rows, by default the GPU's grown to twice what the prompt and
    `requests` - 1 others need at each length; its FP8 form too under `kv_cache_dtype` "fp8_e4m3"). ValueError naming
    the argument for a bad option (a `tp` that does not divide the model's heads or experts among them; the engine
    options as the checks refuse them, or given with calls "prefill"). Verdict PASS when the absorbed path fits,
    FAIL otherwise; one row per path."""
    from glmcheck.checks.band import FAIL, PASS
    from glmcheck.evaluate.report import Report
    from glmcheck.model.memory import HEADROOM, PATHS, plan_memory
    from glmcheck.model.presets import PRESETS, make_config

    if model not in PRESETS:
        raise ValueError(f"{flag('model')} must be one of {', '.join(PRESETS)}, got {model!r}")
    check_layers(layers)
    check_experts(experts)
    check_count(tp, flag("tp"))
    check_count(tokens, flag("tokens"))
    check_number(gpu_gib, flag("gpu_gib"), positive=True)
    if weights not in WEIGHT_FORMATS:
        raise ValueError(f"{flag('weights')} must be one of {', '.join(WEIGHT_FORMATS)}, got {weights!r}")
    check_serving_options(calls, pool_rows, requests, kv_cache_dtype)
    config = make_config(model, layers=layers, experts=experts)
    pool = _gpu_pool(config, tokens, pool_rows, requests, kv_cache_dtype) if calls == "serving" else None
    try:
        plans = [plan_memory(config, tp, tokens, gpu_gib, path, weights, pool if path == "absorbed" else None)
                 for path in PATHS]
    except ValueError as err:  # the shard check names the library's argument: "tp 3 must divide ..."
        if str(err).startswith(f"tp {tp} "):
            raise ValueError(f"{flag('tp')} {str(err)[len('tp '):]} of {model}") from None
        raise
    serving = pool is not None
    rows = [{**_fields(plan, serving), "total_gib_per_rank": plan.total_gib_per_rank, "fits": plan.fits}
            for plan in plans]
    options = {"tp": tp, "layers": layers, "experts": experts, "tokens": tokens, "gpu_gib": gpu_gib, "weights": weights}
    if serving:
        options.update(calls=calls, pool_rows=pool_rows, requests=requests, kv_cache_dtype=kv_cache_dtype)
    return Report("plan", PASS if plans[0].fits else FAIL, rows, {"headroom": HEADROOM}, {"preset": model}, options,
                  extra={"table": _text(model, plans, tokens, gpu_gib, weights, HEADROOM, serving,
                                        _dummy_stack_gib(config))})


def check_serving_options(calls: str, pool_rows: int | None, requests: int | None, kv_cache_dtype: str | None) -> None:
    """ValueError naming the argument: the engine options as the checks check them (`check_engine_options`: `calls`
    prefill or serving, a pool a multiple of 64 rows, at most 64 requests, neither with prefill), `kv_cache_dtype`
    one of None, bf16, fp8_e4m3, and fp8_e4m3 only with calls serving (one-shot calls hold no pool to size)."""
    check_engine_options(calls, None, pool_rows, requests)
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ValueError(f"{flag('kv_cache_dtype')} must be one of None, bf16, fp8_e4m3, got {kv_cache_dtype!r}")
    if kv_cache_dtype == "fp8_e4m3" and calls != "serving":
        raise ValueError(f"{flag('kv_cache_dtype')} fp8_e4m3 sizes the pool of {flag('calls')} serving in the plan "
                         f"(one-shot calls hold none): give it with {flag('calls')} serving")


def _gpu_pool(config, tokens: int, pool_rows: int | None, requests: int | None,
              kv_cache_dtype: str | None) -> PoolSize:
    """(rows, bytes) of the pool a prompt of T tokens holds on a GPU (`serving_pool`, as a check on cuda resolves it;
    None past what a given pool holds), checked at `tokens` (ValueError naming --pool-rows when it cannot hold it)."""
    from glmcheck.model.engine_pool import serving_pool
    from glmcheck.model.engine_shape import EngineShape

    shape, fp8 = EngineShape(pool_rows=pool_rows, requests=requests), kv_cache_dtype == "fp8_e4m3"
    serving_pool(config, shape, tokens, "cuda", fp8=fp8)

    def pool(length: int) -> tuple[int, int] | None:
        try:
            return serving_pool(config, shape, length, "cuda", fp8=fp8)
        except ValueError:  # a given --pool-rows too small for this length
            return None

    return pool


def _fields(plan, serving: bool) -> dict:
    """A row of the record: the plan's fields, the pool's only under --calls serving (one-shot records as before)."""
    fields = dataclasses.asdict(plan)
    if not serving:
        del fields["pool_gib"], fields["pool_rows"]
    return fields


def _dummy_stack_gib(config) -> float:
    """GiB of the largest expert stack's fp32 values, which a dummy FP8 build holds whole while quantising it
    (`fp8_build.quantized_dummy`: the seeded values are one generator's draw over the whole tensor)."""
    from glmcheck.model.memory import GIB

    return config.n_routed_experts * 2 * config.moe_intermediate_size * config.hidden_size * 4 / GIB


def _text(model: str, plans: list, tokens: int, gpu_gib: float, weights: str, headroom: float,
          serving: bool = False, dummy_stack_gib: float = 0.0) -> str:
    """What `glmcheck plan` prints: a line naming the model, the table (a row per term, a column per attention
    path: within 120 columns) and the notes under it, wrapped at 120; under --calls serving a pool row and its note."""
    from glmcheck.records.tables import markdown_table

    def gib(digits: int = 1):
        return lambda value: f"{value:.{digits}f} GiB"

    fp8 = weights == "fp8"
    terms = [("params total", "params_total", lambda v: f"{v / 1e9:.1f} B"),
             ("params / rank", "params_per_rank", lambda v: f"{v / 1e9:.2f} B")]
    if fp8:
        terms += [("FP8 codes", "codes_gib", gib()), ("scales", "scales_gib", gib(2)),
                  ("bf16 tensors", "dense_gib", gib())]
    terms += [("weights / rank", "weights_gib_per_rank", gib())]
    terms += [("transient", "transient_gib", gib())] if fp8 else []
    terms += [(f"activations @{tokens}", "activations_gib", gib())]
    if serving:
        terms += [("serving pool", "pool_gib", lambda v: f"{v:.1f} GiB" if v else "-")]
    terms += [("total / rank", "total_gib_per_rank", gib()),
              (f"fits {gpu_gib:g} GiB", "fits", lambda v: "yes" if v else "no"),
              ("max layers that fit", "max_layers", str), ("max tokens that fit", "max_tokens", lambda v: f"{v:,}")]
    table = markdown_table(["per rank"] + [LABELS[plan.path] for plan in plans],
                           [[name] + [show(getattr(plan, field)) for plan in plans] for name, field, show in terms])
    if fp8:
        note = (f"FP8 weights resident: the tensors a GLM-5.x FP8 checkpoint stores in FP8 as e4m3 codes (1 byte) "
                f"and fp32 128 x 128 block scales, the rest (embeddings, lm_head, norms, router, indexer) in bf16 "
                f"(router fp32); transient: the largest module's weights dequantised to bf16 at once (an MoE layer's "
                f"two expert stacks) and its fp32 workspace; a build from dummy weights also holds, while it quantises "
                f"each expert stack, that stack's fp32 values ({dummy_stack_gib:.1f} GiB, during the build only: "
                f"not in the total); {_common(headroom)}")
    else:
        note = f"bf16 weights (router fp32); {_common(headroom)}"
    notes = [note] + ([_pool_note(plans[0], tokens)] if serving else [])
    head = (f"{model}: {plans[0].layers} layers at --tp {plans[0].tp}, {weights} weights, one prefill of {tokens} "
            f"tokens, on a GPU of {gpu_gib:g} GiB")
    return "\n".join([head, table] + [textwrap.fill(line, 120) for line in notes])


def _pool_note(plan, tokens: int) -> str:
    from glmcheck.model.memory import GIB

    row_bytes = round(plan.pool_gib * GIB / plan.pool_rows)
    return (f"serving pool: the paged KV pool a --calls serving forward holds on a GPU, {plan.pool_rows:,} rows x "
            f"{row_bytes} bytes at {tokens} tokens (bf16 rows of d_qk, the FP8 row under fp8_e4m3, the int64 draw "
            f"that fills it; a default pool grows to twice what the requests need, in 'max tokens' too); on the "
            f"absorbed path only, the dense hf_* paths are called one-shot")


def _common(headroom: float) -> str:
    return (f"activations: a conservative estimate of one prefill's peak, linear in the length on the absorbed path "
            f"(chunked indexer), quadratic on the dense hf_* paths; 'fits' allows {headroom:.0%} of the GPU; the exit "
            f"status follows the absorbed row. Per torchrun rank: one process emulating --tp (no torchrun) holds "
            f"every weight and head, as --tp 1 shows")
