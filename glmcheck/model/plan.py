"""Memory needed per GPU before anything is loaded: weights of one TP shard plus activations.

Weights are counted exactly from the module shapes (the model built on the meta device) with
the sharding rules of `glmcheck.model.sharding` (attention heads and MLP widths split over tp,
everything else replicated), in bf16 (fp32 for the router). Activations are a rough upper
estimate for one prefill of T tokens (logits of the last position only): the indexer's fp32
score tensor [T, index_heads, T] dominates at long prompts, then the causal and index masks,
a few hidden-state buffers and the absorbed query / kernel output of H/tp heads.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from transformers import GlmMoeDsaConfig

from glmcheck.model.sharding import check_divisible, full_shapes, slicer

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

    @property
    def total_gib_per_rank(self) -> float:
        return self.weights_gib_per_rank + self.activations_gib

    @property
    def fits(self) -> bool:
        return self.total_gib_per_rank <= HEADROOM * self.gpu_gib


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _rank_bytes(config: GlmMoeDsaConfig, tp: int) -> tuple[int, int, list[int], int]:
    """(params total, params per rank, bytes per rank of each layer, bytes per rank outside layers)."""
    total = per_rank = other_bytes = 0
    layer_bytes = [0] * config.num_hidden_layers
    for name, shape in full_shapes(config).items():
        count = _numel(shape)
        mine = count // tp if slicer(name, 0, tp) is not None else count
        size = mine * (4 if name.endswith(("mlp.gate.weight", "e_score_correction_bias")) else 2)
        total, per_rank = total + count, per_rank + mine
        if name.startswith("model.layers."):
            layer_bytes[int(name.split(".")[2])] += size
        else:
            other_bytes += size
    return total, per_rank, layer_bytes, other_bytes


def activation_bytes(config: GlmMoeDsaConfig, tp: int, tokens: int) -> int:
    """Rough upper estimate of one prefill's live activations on one rank (see module docstring)."""
    t = tokens
    indexer = t * config.index_n_heads * t * 4 + 2 * t * t * 4           # scores and index scores (fp32)
    masks = 2 * t * t                                                    # causal + index masks (bool)
    hidden = 8 * t * config.hidden_size * 2                               # residual stream buffers
    heads = config.num_attention_heads // tp
    attention = 3 * t * heads * (config.kv_lora_rank + config.qk_rope_head_dim) * 4
    moe = t * config.num_experts_per_tok * 2 * (config.moe_intermediate_size // tp) * 2
    return indexer + masks + hidden + attention + moe


def plan_memory(config: GlmMoeDsaConfig, tp: int, tokens: int, gpu_gib: float = 141.0) -> MemoryPlan:
    """Per-rank memory of `config` at TP degree `tp` for a prefill of `tokens` tokens."""
    if tp < 1 or tokens < 1 or gpu_gib <= 0:
        raise ValueError(f"tp and tokens must be positive and gpu_gib > 0, got {tp}, {tokens}, {gpu_gib}")
    check_divisible(config, tp)
    total, per_rank, layer_bytes, other_bytes = _rank_bytes(config, tp)
    activations = activation_bytes(config, tp, tokens)
    budget = HEADROOM * gpu_gib * GIB - other_bytes - activations
    max_layers, used = 0, 0
    for size in layer_bytes:  # `--layers N` keeps the first N layers (dense ones first)
        if used + size > budget:
            break
        used, max_layers = used + size, max_layers + 1
    return MemoryPlan(config.num_hidden_layers, tp, tokens, total, per_rank, (sum(layer_bytes) + other_bytes) / GIB,
                      activations / GIB, gpu_gib, max_layers)


def device_bytes(device) -> int:
    """Memory of `device`: a CUDA GPU's total, or the machine's physical memory for the CPU."""
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_fits(config: GlmMoeDsaConfig, tokens: int, device, option: str = "--tokens") -> None:
    """ValueError naming `option` when one process's prefill of `tokens` tokens (all weights, the
    rough activation estimate) needs more memory than `device` has at all: a run that cannot fit
    fails here, before anything is allocated. The estimate is an upper bound, so this only refuses
    what could never run."""
    _, _, layer_bytes, other_bytes = _rank_bytes(config, 1)
    need = sum(layer_bytes) + other_bytes + activation_bytes(config, 1, tokens)
    have = device_bytes(device)
    if need > have:
        raise ValueError(f"{option} {tokens}: a prefill of {config.num_hidden_layers} layers needs about "
                         f"{need / GIB:,.0f} GiB (weights and activations, `glmcheck plan`), more than the "
                         f"{have / GIB:,.0f} GiB of {device}")


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
