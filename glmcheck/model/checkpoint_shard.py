"""One tensor-parallel rank's shard of a real checkpoint (under torchrun).

Each rank builds the module skeleton of its shard (`sharding.build_shard`), then reads every
tensor it holds from the safetensors files, one whole tensor at a time (FP8 blocks dequantised
with their `weight_scale_inv`), and keeps its slice by the same rules the dummy shards use
(`sharding.slicer`). Routed experts are stored per expert in the files
(`experts.{e}.gate_proj/up_proj/down_proj.weight`) and held fused by the model
(`experts.gate_up_proj` [E, 2I, hidden] = gate rows then up rows, `experts.down_proj`
[E, hidden, I]); they are assembled here before slicing. Memory per rank: its shard plus one
whole tensor (one fused expert stack) at a time. `layer0_only` trims the model to the embedding
and layer 0 as `checkpoint.load_layer0_model` does.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import torch

from glmcheck.model.checkpoint_files import (
    FUSED_EXPERTS,
    CheckpointError,
    check_tensors,
    format_shape,
    fp8_block,
    open_safetensors,
    read_config,
    read_tensor,
    trim_to_layer0,
    weight_map,
)
from glmcheck.model.sharding import build_shard, full_shapes, slicer


@torch.no_grad()
def load_checkpoint_shard(path: str | os.PathLike, *, rank: int, world: int, device: torch.device | str = "cpu",
                          reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
                          layer0_only: bool = False, attn_implementation: str = "sdpa") -> torch.nn.Module:
    """Rank `rank` of `world`'s shard of the checkpoint at `path`, in eval mode (see module docstring).

    Raises CheckpointError naming the tensor when the files lack one the shard needs.
    """
    config = read_config(path)
    check_tensors(path, config)  # the whole checkpoint against its whole config (metadata only), every rank
    block = fp8_block(config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    if layer0_only:
        trim_to_layer0(config, path)
    root, mapping = Path(path), weight_map(path)
    model = build_shard(config, rank=rank, world=world, device=device, reduce=reduce,
                        attn_implementation=attn_implementation)
    shapes = full_shapes(config)
    persistent = set(model.state_dict())
    named = list(model.named_parameters()) + [(n, b) for n, b in model.named_buffers() if n in persistent]
    for name, tensor in named:
        whole = read_whole_tensor(root, mapping, name, block)
        if tuple(whole.shape) != tuple(shapes[name]):
            raise CheckpointError(f"checkpoint {str(root)!r}: tensor {name} is {format_shape(whole.shape)} as read, "
                                  f"but config.json implies {format_shape(shapes[name])}")
        cut = slicer(name, rank, world)
        tensor.copy_((cut(whole) if cut else whole).to(tensor.dtype))
    if layer0_only:
        model.glmcheck_unloaded = []
    return model


def read_whole_tensor(root: Path, mapping: dict[str, str], name: str, block: tuple[int, int]) -> torch.Tensor:
    """The whole (unsharded) tensor `name` of the model, read from the checkpoint files."""
    fused = FUSED_EXPERTS.match(name)
    if fused:
        return _read_fused_experts(root, mapping, fused["prefix"], fused["kind"], block)
    if name not in mapping:
        raise CheckpointError(f"checkpoint {str(root)!r} lacks tensor {name}")
    with open_safetensors(root / mapping[name]) as handle:
        return read_tensor(handle, mapping, root, name, block)


def _read_fused_experts(root: Path, mapping: dict[str, str], prefix: str, kind: str,
                        block: tuple[int, int]) -> torch.Tensor:
    """[E, 2I, hidden] (gate rows, then up rows) or [E, hidden, I] from the per-expert tensors."""
    experts = sorted({int(m[1]) for n in mapping if (m := re.match(re.escape(prefix) + r"\.(\d+)\.", n))})
    if not experts or experts != list(range(len(experts))):
        raise CheckpointError(f"checkpoint {str(root)!r} lacks the per-expert tensors of {prefix}")
    parts = ("gate_proj", "up_proj") if kind == "gate_up_proj" else ("down_proj",)
    stack = []
    for expert in experts:
        pieces = [read_whole_tensor(root, mapping, f"{prefix}.{expert}.{part}.weight", block) for part in parts]
        stack.append(torch.cat(pieces, dim=0))
    return torch.stack(stack)
