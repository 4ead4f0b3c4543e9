"""A block-FP8 checkpoint with its FP8 weights resident: the whole model in one process, or one tensor-parallel
rank's shard under torchrun (`load_resident_checkpoint`), built by `fp8_build.build_resident`.

Each FP8 weight is read as its e4m3 codes and `weight_scale_inv` blocks (`BlockFP8`), one tensor at a time, never
dequantised; a routed-expert stack is assembled per expert (gate rows then up rows, each with its own blocks, as
the files store them) and each expert cut for the rank before the next is read, so a rank holds its shard plus one
expert's tensors. Every other tensor (embeddings, lm_head, norms, router, indexer) is read and cut as
`checkpoint_shard` reads it. The checkpoint is first held against its config (`checkpoint_files.check_tensors`: names,
shapes, FP8 codes in e4m3 with finite scales of the right shape).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import torch

from glmcheck.model.checkpoint_files import (
    FP8_DTYPE,
    FUSED_EXPERTS,
    SCALE_SUFFIX,
    CheckpointError,
    check_scale_values,
    check_tensors,
    fp8_block,
    is_fp8,
    open_safetensors,
    read_config,
    tensor_metadata,
    trim_to_layer0,
    weight_map,
)
from glmcheck.model.checkpoint_shard import read_whole_tensor
from glmcheck.model.fp8_build import DenseSource, FP8Source, build_resident
from glmcheck.model.fp8_codes import BlockFP8
from glmcheck.model.sharding import cut_kind, slicer


@torch.no_grad()
def load_resident_checkpoint(path: str | os.PathLike, *, rank: int = 0, world: int = 1,
                             device: torch.device | str = "cpu", reduce: Callable | None = None,
                             layer0_only: bool = False, attn_implementation: str = "sdpa") -> torch.nn.Module:
    """The block-FP8 checkpoint at `path` with its FP8 weights resident: rank `rank` of `world`'s shard (world 1:
    the whole model) on `device`, in eval mode. `layer0_only` keeps the embedding and layer 0 (and the final norm
    and lm_head: the model's own, not dummies). CheckpointError for a checkpoint that is not block-FP8."""
    config = read_config(path)
    if not is_fp8(config):
        raise CheckpointError(f"checkpoint {str(path)!r} has no fp8 quantization_config: its weights are not "
                              f"block-FP8 (--weights fp8 holds an FP8 checkpoint's codes; this one loads with "
                              f"--weights bf16)")
    check_tensors(path, config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    if layer0_only:
        trim_to_layer0(config, path)
    fp8, dense = checkpoint_sources(path, rank=rank, world=world, device=device)
    model = build_resident(config, rank=rank, world=world, device=device, fp8=fp8, dense=dense, reduce=reduce,
                           attn_implementation=attn_implementation)
    if layer0_only:
        model.glmcheck_unloaded = []
    return model


def checkpoint_sources(path: str | os.PathLike, *, rank: int, world: int,
                       device: torch.device | str) -> tuple[FP8Source, DenseSource]:
    """The (fp8, dense) sources of `fp8_build.build_resident` for the checkpoint at `path`: FP8 weights as codes and
    scales (per the files' dtypes), every other tensor read whole (`checkpoint_shard.read_whole_tensor`) and cut."""
    root, mapping = Path(path), weight_map(path)
    block = fp8_block(read_config(path))
    dtypes = {name: dtype for name, (_, dtype) in tensor_metadata(root, mapping).items()}
    device = torch.device(device)

    def fp8(name: str) -> BlockFP8 | None:
        fused = FUSED_EXPERTS.match(name)
        if fused:
            return _fused_experts(root, mapping, dtypes, name, block, rank, world)
        if dtypes.get(name) != FP8_DTYPE:
            return None
        return _read_blocks(root, mapping, name, block).cut(cut_kind(name), rank, world).compact()

    def dense(name: str, meta: torch.Tensor) -> torch.Tensor:
        whole = read_whole_tensor(root, mapping, name, block)
        cut = slicer(name, rank, world)
        return (cut(whole) if cut else whole).to(meta.dtype).to(device).clone()

    return fp8, dense


def _read_blocks(root: Path, mapping: dict[str, str], name: str, block: tuple[int, int]) -> BlockFP8:
    """The FP8 weight `name` as its codes and scales (CheckpointError naming the tensor if they do not fit)."""
    scale_name = name + SCALE_SUFFIX
    if scale_name not in mapping:
        raise CheckpointError(f"checkpoint {str(root)!r}: FP8 tensor {name} has no {scale_name}")
    with open_safetensors(root / mapping[name]) as handle:
        codes = handle.get_tensor(name)
    with open_safetensors(root / mapping[scale_name]) as handle:
        scale = handle.get_tensor(scale_name)
    check_scale_values(root, mapping[scale_name], scale_name, scale)
    try:
        return BlockFP8.from_blocks(codes, scale, block)
    except ValueError as err:
        raise CheckpointError(f"checkpoint {str(root)!r}: {name}: {err}") from None


def _fused_experts(root: Path, mapping: dict[str, str], dtypes: dict[str, str], name: str, block: tuple[int, int],
                   rank: int, world: int) -> BlockFP8 | None:
    """The rank's cut of the fused expert stack `name` from the per-expert FP8 tensors; None when they are not FP8."""
    fused = FUSED_EXPERTS.match(name)
    prefix, kind = fused["prefix"], fused["kind"]
    experts = sorted({int(m[1]) for n in mapping if (m := re.match(re.escape(prefix) + r"\.(\d+)\.", n))})
    if not experts or experts != list(range(len(experts))):
        raise CheckpointError(f"checkpoint {str(root)!r} lacks the per-expert tensors of {prefix}")
    parts = ("gate_proj", "up_proj") if kind == "gate_up_proj" else ("down_proj",)
    names = [[f"{prefix}.{e}.{part}.weight" for part in parts] for e in experts]
    fp8 = {n: dtypes.get(n) == FP8_DTYPE for row in names for n in row}
    if not any(fp8.values()):
        return None
    if not all(fp8.values()):
        dense = next(n for n, is_fp8_tensor in fp8.items() if not is_fp8_tensor)
        raise CheckpointError(f"checkpoint {str(root)!r}: tensor {dense} is {dtypes.get(dense)} while other experts "
                              f"of {prefix} are {FP8_DTYPE}; a fused expert stack is FP8 throughout or not at all")
    rule = cut_kind(name)
    stack = [BlockFP8.cat_rows([_read_blocks(root, mapping, n, block) for n in row]).cut(rule, rank, world).compact()
             for row in names]
    return BlockFP8.stack(stack)
