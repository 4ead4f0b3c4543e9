"""Memory needed per GPU before anything is loaded: weights of one TP shard plus activations.

Weights are counted exactly from the module shapes (the model built on the meta device) with
the sharding rules of `glmcheck.model.sharding` (attention heads and MLP widths split over tp,
everything else replicated), in bf16 (fp32 for the router), or with the FP8 weights resident
(`weights="fp8"`: codes, scales and the just-in-time dequantisation's transient, `weight_bytes`).
Activations are a conservative
estimate of one prefill's peak (`activation_terms` names each term): on the absorbed path that
glmcheck's swap runs (reference, band:K, triton_sparse_mla..., flashmla_sparse, torch_bf16,
plug-ins) every term is linear in T (the indexer runs in query chunks within a fixed budget,
`glmcheck.model.indexer_chunks`); transformers' dense hf_eager / hf_sdpa paths add [T, T] masks
and indexer scores, so they are bounded separately (`check_fits(..., backends=...)`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from transformers import GlmMoeDsaConfig

from glmcheck.model.indexer_chunks import INDEX_BUDGET_BYTES, chunk_rows, row_bytes
from glmcheck.model.sharding import check_divisible
from glmcheck.model.weight_bytes import rank_weights

GIB = 2**30
HEADROOM = 0.9  # fraction of the GPU's memory the plan allows itself


@dataclass(frozen=True)
class MemoryPlan:
    layers: int
    tp: int
    tokens: int
    params_total: int
    params_per_rank: int
    weights_gib_per_rank: float
    activations_gib: float
    gpu_gib: float
    max_layers: int  # of this config's layers, the first N that fit (at most its layer count)
    path: str = "absorbed"  # whose activations: the absorbed swap, or transformers' hf_sdpa / hf_eager
    max_tokens: int = 0  # the longest prompt whose activations fit beside all of this config's weights
    weights: str = "bf16"  # the format the weights are held in (`weight_bytes.WEIGHT_FORMATS`)
    codes_gib: float = 0.0  # fp8: e4m3 codes / their block scales and maps / every other tensor (in weights_gib)
    scales_gib: float = 0.0
    dense_gib: float = 0.0
    transient_gib: float = 0.0  # fp8: the largest module's weights dequantised at once, beside the held ones
    pool_gib: float = 0.0  # --calls serving: the paged KV pool held through each forward (0: one-shot calls)
    pool_rows: int = 0  # ... its rows at `tokens`

    @property
    def total_gib_per_rank(self) -> float:
        return self.weights_gib_per_rank + self.transient_gib + self.activations_gib + self.pool_gib

    @property
    def fits(self) -> bool:
        return self.total_gib_per_rank <= HEADROOM * self.gpu_gib


PATHS = ("absorbed", "hf_sdpa", "hf_eager")  # the absorbed swap (every other backend) and transformers' dense ones
OUT_BYTES = 8  # the widest kernel output an absorbed backend returns: reference:fp64, [T, H, kv_lora_rank] fp64
PLAN_COPIES = 8  # union plans held at once: one per emulated TP rank (in-process --tp 8), 5 bytes per top-k slot
BACKEND_WORKSPACE = 2 * GIB  # a backend's own token chunks (reference: 256 MiB of gathered rows and their copies;
#                              torch_bf16: 512 tokens x top-k x 576 bf16 rows, their scores and probabilities)


def activation_terms(config: GlmMoeDsaConfig, tp: int, tokens: int, path: str = "absorbed",
                     index_budget_bytes: int = INDEX_BUDGET_BYTES) -> dict[str, int]:
    """Bytes of each term of one prefill's peak activations on one rank (batch 1, T = `tokens`), by name.

    Symbols: d hidden, h = heads / tp, Q q_lora, N/R/V nope/rope/v dims, L kv_lora, Hi/Di index heads/dim,
    K' = min(index_topk, T), k experts per token, E routed experts, I/Im dense/MoE widths / tp, n layers.
    Held through the whole forward:
      hidden      6 T d 2           embeddings, residual stream, normed input, attention / MLP outputs
      kv_cache    n T (max(2h(N+R+V), 2(L+R)) + 2Di)   transformers' DynamicCache: 5.17 caches the expanded K/V of
                                    h heads, 5.24 the latent row, plus the indexer keys; glmcheck's forwards pass
                                    use_cache=False, the term stays for callers that cache (conservative)
      selection   12 T K'           int32 top-k: the previous full layer's, its kernel indices, the new one
    Per layer, the largest phase (`attention` or `mlp`):
      attention   transformers' attention locals 2T(Q + 3h(N+R) + hR + h(N+V) + 2(L+R)) plus, absorbed:
                  max(indexer: T(6 Hi Di + 4 Hi + 8 Di) + one query chunk (`indexer_chunks.chunk_rows`: rows
                  of T(4 Hi + 17) bytes, as many as index_budget_bytes holds, at least 32; all T when T <= K),
                  swap: q_abs 2Th(L+R) + max(its fp32 build 4Th(L+R), kernel indices 36 T K',
                  kernel output and one rank's copy 1.5 T h L OUT_BYTES + T K' + plans 5 T K' PLAN_COPIES
                  + BACKEND_WORKSPACE, value expansion T h (L OUT_BYTES + 4L + 6V)));
                  dense hf paths: their indexer's fp32 scores 8 Hi T^2 (a product and its relu are out of place)
                  or the masks 4 T^2 (bool) and SDPA's bf16 mask and its aligned copy 4 T^2 (hf_sdpa), or eager's
                  scores 8 h T^2 (bf16 product, masked sum, fp32 softmax, bf16 copy) and masks 8 T^2 (hf_eager)
      mlp         dense 2T(4I + d); MoE: router 16 T E + routed experts max(grouped_mm: T k (32 + 12d + 8 Im),
                  eager: T (8k(E+1) + 12d + 8 Im)) + shared experts 8 T Im n_shared
    causal_mask  hf paths only: transformers' [T, T] causal mask (bool; bf16 for eager), held through the forward
    All in bytes. Not counted: dense_threshold's [T, T] selection (only for T <= its threshold). Measured on an
    H200 (glm-5.2, 4 layers, 16 experts, one process, --tp 8 emulated, triton_sparse_mla): 14.0 / 28.1 / 56.1 /
    84.1 GiB of activations at 16384 / 32768 / 65536 / 98304 tokens, 0.76 to 0.83 of this estimate (tp 1).
    """
    if path not in PATHS:
        raise ValueError(f"path must be one of {', '.join(PATHS)}, got {path!r}")
    c, t = config, tokens
    h, d, kk = c.num_attention_heads // tp, c.hidden_size, min(c.index_topk, t)
    lat, rope, nope, v = c.kv_lora_rank, c.qk_rope_head_dim, c.qk_nope_head_dim, c.v_head_dim
    hi, di = c.index_n_heads, c.index_head_dim
    terms = {
        "hidden": 6 * t * d * 2,
        "kv_cache": c.num_hidden_layers * t * (max(2 * h * (nope + rope + v), 2 * (lat + rope)) + 2 * di),
        "selection": 12 * t * kk,
    }
    inputs = 2 * t * (c.q_lora_rank + 3 * h * (nope + rope) + h * rope + h * (nope + v) + 2 * (lat + rope))
    if path == "absorbed":
        chunk = min(t, chunk_rows(1, t, t, hi, di, c.index_topk, index_budget_bytes)) * row_bytes(1, t, hi)
        indexer = t * (6 * hi * di + 4 * hi + 8 * di) + chunk
        q_abs = 2 * t * h * (lat + rope)
        swap = q_abs + max(4 * t * h * (lat + rope), 36 * t * kk,
                           3 * t * h * lat * OUT_BYTES // 2 + t * kk + 5 * t * kk * PLAN_COPIES + BACKEND_WORKSPACE,
                           t * h * (lat * OUT_BYTES + 4 * lat + 6 * v))
        attention = inputs + max(indexer, swap)
    else:
        terms["causal_mask"] = t * t * (2 if path == "hf_eager" else 1)
        scores = 8 * hi * t * t + t * (6 * hi * di + 4 * hi + 8 * di)
        dense = 8 * t * t if path == "hf_sdpa" else 8 * h * t * t + 8 * t * t
        attention = inputs + max(scores, dense)
    dense_layers = min(getattr(c, "first_k_dense_replace", 0), c.num_hidden_layers)
    mlp = 2 * t * (4 * c.intermediate_size // tp + d) if dense_layers else 0
    if dense_layers < c.num_hidden_layers:  # MoE layers
        k, experts, im = c.num_experts_per_tok, c.n_routed_experts, c.moe_intermediate_size // tp
        routed = max(t * k * (32 + 12 * d + 8 * im), t * (8 * k * (experts + 1) + 12 * d + 8 * im))
        mlp = max(mlp, 16 * t * experts + routed + 8 * t * im * c.n_shared_experts)
    terms["attention"], terms["mlp"] = attention, mlp
    return terms


def activation_bytes(config: GlmMoeDsaConfig, tp: int, tokens: int, path: str = "absorbed",
                     index_budget_bytes: int = INDEX_BUDGET_BYTES) -> int:
    """Conservative peak of one prefill's activations on one rank (`activation_terms`): the held terms plus the
    larger of a layer's attention and MLP phases. Linear in T on the absorbed path (past the index budget)."""
    terms = activation_terms(config, tp, tokens, path, index_budget_bytes)
    layer = max(terms.pop("attention"), terms.pop("mlp"))
    return sum(terms.values()) + layer


PoolSize = Callable[[int], "tuple[int, int] | None"]  # tokens -> (rows, bytes) of its pool; None: it cannot hold them


def max_tokens(config: GlmMoeDsaConfig, tp: int, budget: float, path: str = "absorbed", limit: int = 1 << 24,
               pool: PoolSize | None = None) -> int:
    """The longest prompt (at most `limit` tokens) whose activations on `path`, and the pool `pool` gives it (its
    bytes non-decreasing in the length, None past what a given pool holds), fit `budget` bytes; 0 if none."""
    low, high = 0, limit
    while low < high:
        mid = (low + high + 1) // 2
        pool_at_mid = pool(mid) if pool is not None else (0, 0)
        if pool_at_mid is not None and activation_bytes(config, tp, mid, path) + pool_at_mid[1] <= budget:
            low = mid
        else:
            high = mid - 1
    return low


def plan_memory(config: GlmMoeDsaConfig, tp: int, tokens: int, gpu_gib: float = 141.0,
                path: str = "absorbed", weights: str = "bf16", pool: PoolSize | None = None) -> MemoryPlan:
    """Per-rank memory of `config` at TP degree `tp` for a prefill of `tokens` tokens on `path`
    (`activation_terms`: "absorbed", "hf_sdpa" or "hf_eager"), the weights held as `weights` ("bf16", or "fp8":
    FP8 weights resident, `weight_bytes`). `pool`: under --calls serving, (rows, bytes) of the paged KV pool a
    prompt of T tokens holds through each forward (`glmcheck.model.engine_pool.serving_pool`; None where a given
    pool cannot hold it), counted in the total and in the layers and the longest prompt that fit."""
    if tp < 1 or tokens < 1 or gpu_gib <= 0:
        raise ValueError(f"tp and tokens must be positive and gpu_gib > 0, got {tp}, {tokens}, {gpu_gib}")
    check_divisible(config, tp)
    held = rank_weights(config, tp, weights)
    activations = activation_bytes(config, tp, tokens, path)
    pool_at_tokens = pool(tokens) if pool is not None else (0, 0)
    if pool_at_tokens is None:
        raise ValueError(f"pool: the pool cannot hold a prompt of {tokens} tokens")
    pool_rows, pooled = pool_at_tokens
    budget = HEADROOM * gpu_gib * GIB - held.other_bytes - activations - pooled
    max_layers, used = 0, 0
    for size in held.layer_bytes:  # `--layers N` keeps the first N layers (dense ones first)
        if used + size + held.transient(max_layers + 1) > budget:
            break
        used, max_layers = used + size, max_layers + 1
    longest = max_tokens(config, tp, HEADROOM * gpu_gib * GIB - held.held - held.transient(), path, pool=pool)
    return MemoryPlan(config.num_hidden_layers, tp, tokens, held.params_total, held.params_per_rank, held.held / GIB,
                      activations / GIB, gpu_gib, max_layers, path, longest, weights, held.codes / GIB,
                      held.scales / GIB, held.dense / GIB, held.transient() / GIB, pooled / GIB, pool_rows)


def device_bytes(device) -> int:
    """Memory of `device`: a CUDA GPU's total, or the machine's physical memory for the CPU."""
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_fits(config: GlmMoeDsaConfig, tokens: int, device, option: str = "--tokens",
               backends: Iterable[str] | None = None, *, tp: int = 1, weights: str = "bf16", pool: int = 0) -> None:
    """ValueError naming `option` when one process's prefill of `tokens` tokens (its weights, the
    conservative activation estimate of the absorbed path) needs more memory than `device` has at all,
    or, naming the backend and its longest prompt, when one of `backends` is transformers' dense
    hf_eager / hf_sdpa and its [T, T] masks and scores do not fit: a run that cannot fit fails here,
    before anything is allocated. Callers that may run hf_* backends must pass them. `tp`: the TP degree of
    the shard this process holds (a torchrun rank, a rehearsal), 1 when it holds the whole model (emulated
    TP too); `weights`: their format (`weight_bytes`); `pool`: bytes of the paged KV pool that `--calls serving`
    holds through a forward (`glmcheck.model.engine_pool.pool_memory`), 0 for one-shot calls."""
    held = rank_weights(config, tp, weights)
    weights = held.held + held.transient() + pool
    need = weights + activation_bytes(config, tp, tokens)
    have = device_bytes(device)
    if need > have:
        terms = "weights, activations and the --calls serving pool" if pool else "weights and activations"
        raise ValueError(f"{option} {tokens}: a prefill of {config.num_hidden_layers} layers needs about "
                         f"{need / GIB:,.0f} GiB ({terms}, `glmcheck plan`), more than the "
                         f"{have / GIB:,.0f} GiB of {device}")
    for name in dict.fromkeys(b for b in backends or () if b in PATHS[1:]):
        need = weights + activation_bytes(config, tp, tokens, name)
        if need > have:
            longest = max_tokens(config, tp, have - weights, name)
            raise ValueError(f"{option} {tokens}: backend {name} (transformers' dense attention, [T, T] masks and "
                             f"indexer scores) needs about {need / GIB:,.0f} GiB, more than the {have / GIB:,.0f} GiB "
                             f"of {device}; it fits up to {longest:,} tokens (leave it out of --backends beyond)")


def fits_device(config: GlmMoeDsaConfig, tokens: int, device, *, tp: int = 1, weights: str = "bf16") -> bool:
    """Whether a prefill of `tokens` tokens (weights of a TP-`tp` shard in format `weights`, the absorbed path's
    activations) fits within HEADROOM of `device`'s memory (`device_bytes`)."""
    held = rank_weights(config, tp, weights)
    need = held.held + held.transient() + activation_bytes(config, tp, tokens)
    return need <= HEADROOM * device_bytes(device)


def device_memory(device) -> tuple[int, str]:
    """(bytes, description) of what `device` can hold: the machine's physical memory for the CPU,
    the free memory of a CUDA device (`torch.cuda.mem_get_info`)."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return free, f"free on {device} (of {gib(total)})"
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "of RAM"


def gib(nbytes: float) -> str:
    """Bytes as GiB for a message: '0.25 GiB', '3.1 GiB', '29,802 GiB'."""
    value = nbytes / GIB
    return f"{value:.2f} GiB" if value < 1 else f"{value:.1f} GiB" if value < 100 else f"{value:,.0f} GiB"


def check_memory(need: int, device, what: str, detail: str = "") -> None:
    """ValueError naming `what`, the estimate and the device's memory when `need` bytes exceed it."""
    have, where = device_memory(device)
    if need > have:
        raise ValueError(f"{what} needs about {gib(need)}{f' ({detail})' if detail else ''}, more than the "
                         f"{gib(have)} {where}")
