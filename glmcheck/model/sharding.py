"""Tensor-parallel shards of a GLM-MoE-DSA model: what rank r of N holds, and how it is built.

Rank r holds heads [r*H/N, (r+1)*H/N) of every attention layer (q_b_proj and kv_b_proj rows,
o_proj columns), a 1/N slice of every MLP's intermediate dimension (dense MLP, shared experts
and every routed expert: gate/up rows, down columns), and a full copy of everything else (the
embedding, norms, q_a/kv_a projections, the indexer, the router, lm_head). Each shard is cut
from the same whole seeded tensor the single-process build has, so the weights are identical.
The partial sums of o_proj and of each MLP are all-reduced by forward hooks.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable

import torch
from transformers import GlmMoeDsaConfig, GlmMoeDsaForCausalLM
from transformers.initialization import no_init_weights

from glmcheck.model.build import _default_dtype, keep_fp32
from glmcheck.model.weights import INIT_SCALES, seeded_tensor


def check_divisible(config: GlmMoeDsaConfig, world: int) -> None:
    """ValueError unless heads and MLP widths split evenly over `world` ranks."""
    sizes = {"attention heads": config.num_attention_heads, "intermediate_size": config.intermediate_size,
             "moe_intermediate_size": config.moe_intermediate_size}
    bad = {k: v for k, v in sizes.items() if v % world}
    if bad:
        raise ValueError(f"tp {world} must divide {', '.join(f'{k} ({v})' for k, v in bad.items())}")


def shard_config(config: GlmMoeDsaConfig, world: int) -> GlmMoeDsaConfig:
    """The config whose module shapes are one rank's shard (heads and MLP widths / world)."""
    check_divisible(config, world)
    shard = copy.deepcopy(config)
    shard.num_attention_heads = config.num_attention_heads // world
    shard.num_key_value_heads = config.num_key_value_heads // world
    shard.intermediate_size = config.intermediate_size // world
    shard.moe_intermediate_size = config.moe_intermediate_size // world
    return shard


def _split(dim: int, rank: int, world: int) -> Callable[[torch.Tensor], torch.Tensor]:
    def cut(whole: torch.Tensor) -> torch.Tensor:
        return whole.chunk(world, dim=dim)[rank]
    return cut


def _split_gate_up(rank: int, world: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """experts.gate_up_proj [E, 2*I, hidden]: this rank's slice of the gate half and the up half."""
    def cut(whole: torch.Tensor) -> torch.Tensor:
        gate, up = whole.chunk(2, dim=1)
        return torch.cat([gate.chunk(world, dim=1)[rank], up.chunk(world, dim=1)[rank]], dim=1)
    return cut


RULES: list[tuple[str, str]] = [
    (r"self_attn\.(q_b_proj|kv_b_proj)\.weight$", "rows"),
    (r"self_attn\.o_proj\.weight$", "cols"),
    (r"mlp\.(shared_experts\.)?(gate_proj|up_proj)\.weight$", "rows"),
    (r"mlp\.(shared_experts\.)?down_proj\.weight$", "cols"),
    (r"mlp\.experts\.gate_up_proj$", "gate_up"),
    (r"mlp\.experts\.down_proj$", "experts_cols"),
]


def cut_kind(name: str) -> str | None:
    """The rule parameter `name` is cut by ("rows", "cols", "gate_up", "experts_cols"; None: replicated)."""
    for pattern, kind in RULES:
        if re.search(pattern, name):
            return kind
    return None


def slicer(name: str, rank: int, world: int) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """How rank `rank` cuts parameter `name` from the whole tensor (None: replicated)."""
    kind = cut_kind(name)
    if kind is None:
        return None
    return {"rows": _split(0, rank, world), "cols": _split(1, rank, world),
            "gate_up": _split_gate_up(rank, world), "experts_cols": _split(2, rank, world)}[kind]


def full_shapes(config: GlmMoeDsaConfig) -> dict[str, torch.Size]:
    """Parameter and persistent-buffer shapes of the unsharded model (built on the meta device)."""
    with torch.device("meta"), no_init_weights():
        model = GlmMoeDsaForCausalLM(config)
    return {name: tensor.shape for name, tensor in model.state_dict().items()}


def _all_reduce_hook(reduce: Callable[[torch.Tensor], torch.Tensor]) -> Callable:
    def hook(module, args, output):
        return reduce(output)
    return hook


def add_tp_hooks(model: torch.nn.Module, reduce: Callable[[torch.Tensor], torch.Tensor]) -> list:
    """All-reduce the partial sums of each layer's o_proj and MLP (dense or MoE) outputs."""
    handles = []
    for layer in model.model.layers:
        handles.append(layer.self_attn.o_proj.register_forward_hook(_all_reduce_hook(reduce)))
        handles.append(layer.mlp.register_forward_hook(_all_reduce_hook(reduce)))
    return handles


@torch.no_grad()
def build_shard(config: GlmMoeDsaConfig, *, rank: int, world: int, seed: int = 0, init: str = "hf",
                device: torch.device | str = "cpu", reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
                dtype: torch.dtype = torch.bfloat16, attn_implementation: str = "sdpa") -> GlmMoeDsaForCausalLM:
    """Rank `rank`'s shard with seeded dummy weights (slices of the whole tensors), in eval mode.

    `reduce` (e.g. an all-reduce over the ranks) is hooked after every o_proj and MLP.
    """
    if init not in INIT_SCALES:
        raise ValueError(f"init must be one of {', '.join(INIT_SCALES)}, got {init!r}")
    if not 0 <= rank < world:
        raise ValueError(f"rank must be in [0, {world}), got {rank}")
    device = torch.device(device)
    shard = shard_config(config, world)
    shard._attn_implementation = attn_implementation
    with torch.device(device), _default_dtype(dtype), no_init_weights():
        model = GlmMoeDsaForCausalLM(shard)
    keep_fp32(model)
    shapes = full_shapes(config)
    persistent = set(model.state_dict())
    for name, tensor in list(model.named_parameters()) + [(n, b) for n, b in model.named_buffers() if n in persistent]:
        whole = seeded_tensor(name, shapes[name], tensor.dtype, device, seed, init)
        cut = slicer(name, rank, world)
        tensor.copy_(cut(whole) if cut else whole)
    if reduce is not None:
        model.glmcheck_tp_hooks = add_tp_hooks(model, reduce)
    model.glmcheck_tp = (rank, world)
    return model.eval()
