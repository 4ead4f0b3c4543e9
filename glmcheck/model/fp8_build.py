"""A model (or one tensor-parallel rank's shard of it) whose block-FP8 weights are resident (`fp8_resident`), built
without ever holding them in bf16: the module skeleton is laid out on the meta device, then every tensor is
materialised on the target device from a source, in FP8 (codes and scales) where the source holds it so, in its own
dtype otherwise.

Sources: `dummy_sources` (the seeded dummy weights of `glmcheck.model.weights`, each FP8 tensor quantised in
128 x 128 blocks as an FP8 checkpoint of them would store it, `fp8_export`: an expert stack per expert, its gate
and up rows apart) and `glmcheck.model.fp8_checkpoint.checkpoint_sources` (a block-FP8 checkpoint's codes and
scales). Every tensor is cut for its rank from the whole tensor by the rules of `glmcheck.model.sharding`, so the
values are the same for any TP degree, and a dense tensor is bit for bit the one `sharding.build_shard` /
`build.build_dummy_model` holds.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from transformers import GlmMoeDsaConfig, GlmMoeDsaForCausalLM
from transformers.initialization import no_init_weights

from glmcheck.model.build import _default_dtype, keep_fp32
from glmcheck.model.fp8_codes import BlockFP8
from glmcheck.model.fp8_export import held_in_fp8
from glmcheck.model.fp8_resident import hold
from glmcheck.model.sharding import add_tp_hooks, cut_kind, full_shapes, shard_config, slicer
from glmcheck.model.weights import INIT_SCALES, seeded_normal, seeded_tensor

FP8Source = Callable[[str], "BlockFP8 | None"]  # rank's cut of model tensor `name` in FP8; None: it is not FP8
DenseSource = Callable[[str, torch.Tensor], torch.Tensor]  # (name, meta tensor) -> rank's cut, its dtype, on device
QUANTIZE_CHUNK = 1 << 26  # dummy values quantised per step (~1 GiB of temporaries), a stack's experts grouped


@torch.no_grad()
def build_resident(config: GlmMoeDsaConfig, *, rank: int, world: int, device: torch.device | str,
                   fp8: FP8Source, dense: DenseSource, reduce: Callable | None = None,
                   attn_implementation: str = "sdpa") -> GlmMoeDsaForCausalLM:
    """Rank `rank` of `world`'s shard of the model `config` describes (world 1: the whole model), its tensors from
    `fp8` / `dense`, in eval mode. `reduce` is hooked after every o_proj and MLP (`sharding.add_tp_hooks`)."""
    if not 0 <= rank < world:
        raise ValueError(f"rank must be in [0, {world}), got {rank}")
    device = torch.device(device)
    shard = shard_config(config, world)
    shard._attn_implementation = attn_implementation
    with torch.device("meta"), _default_dtype(torch.bfloat16), no_init_weights():
        model = GlmMoeDsaForCausalLM(shard)
    keep_fp32(model)
    persistent = set(model.state_dict())
    named = list(model.named_parameters()) + [(n, b) for n, b in model.named_buffers() if n in persistent]
    for name, meta in named:
        owner_name, _, leaf = name.rpartition(".")
        owner = model.get_submodule(owner_name)
        weight = fp8(name)
        if weight is not None:
            hold(owner, leaf, weight, device)
        elif isinstance(meta, nn.Parameter):
            setattr(owner, leaf, nn.Parameter(dense(name, meta)))
        else:
            owner.register_buffer(leaf, dense(name, meta))
    with torch.device(device), _default_dtype(torch.bfloat16):  # its buffers computed as a device build computes them
        model.model.rotary_emb = type(model.model.rotary_emb)(config=model.config)
    left = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if left:
        raise RuntimeError(f"build_resident left {len(left)} tensors unmaterialised, first {left[0]}")
    if reduce is not None:
        model.glmcheck_tp_hooks = add_tp_hooks(model, reduce)
    model.glmcheck_tp = (rank, world)
    return model.eval()


def dummy_sources(config: GlmMoeDsaConfig, *, rank: int, world: int, device: torch.device | str, seed: int = 0,
                  init: str = "hf") -> tuple[FP8Source, DenseSource]:
    """The seeded dummy weights of the model `config` describes, FP8 where a GLM-5.x FP8 checkpoint stores FP8
    (`fp8_export.held_in_fp8`): generated whole on `device`, rounded to bf16, quantised in 128 x 128 blocks, cut."""
    if init not in INIT_SCALES:
        raise ValueError(f"init must be one of {', '.join(INIT_SCALES)}, got {init!r}")
    device = torch.device(device)
    shapes = full_shapes(config)

    def fp8(name: str) -> BlockFP8 | None:
        if not held_in_fp8(name, shapes[name]):
            return None
        return quantized_dummy(name, shapes[name], device, seed, init, rank, world)

    def dense(name: str, meta: torch.Tensor) -> torch.Tensor:
        whole = seeded_tensor(name, shapes[name], meta.dtype, device, seed, init)
        cut = slicer(name, rank, world)
        return cut(whole).clone() if cut else whole

    return fp8, dense


def quantized_dummy(name: str, shape: torch.Size, device: torch.device, seed: int, init: str, rank: int,
                    world: int, chunk: int = QUANTIZE_CHUNK) -> BlockFP8:
    """Rank `rank`'s cut of the dummy tensor `name` as an FP8 checkpoint of the dummy weights holds it: the bf16
    values quantised per matrix (a fused gate_up stack's gate and up rows apart), a stack `chunk` values at a time."""
    values = seeded_normal(name, shape, device, seed, init)
    kind, parts = cut_kind(name), 2 if name.endswith("gate_up_proj") else 1
    if values.dim() == 2:
        return _quantize_parts(values, parts).cut(kind, rank, world).compact()
    group = max(1, chunk // (shape[-2] * shape[-1]))
    pieces = [_quantize_parts(values[e:e + group], parts).cut(kind, rank, world).compact()
              for e in range(0, shape[0], group)]
    del values
    if device.type == "cuda":
        # The whole stack's fp32 values (24 GiB for a GLM-5.2 expert stack) go back to the driver: kept in the
        # allocator's cache, small tensors split the block and the next stack's values no longer fit beside it
        # (an H100 ran out of memory with 24.7 GiB reserved and unallocated: docs/multigpu.md, "Rank rehearsal").
        torch.cuda.empty_cache()
    return BlockFP8.stack(pieces, cat=True)


def _quantize_parts(values: torch.Tensor, parts: int) -> BlockFP8:
    halves = values.chunk(parts, dim=-2)
    return BlockFP8.cat_rows([BlockFP8.quantize(half.to(torch.bfloat16)) for half in halves])
