"""Real tensor parallelism with torch.distributed, launched by torchrun (any N).

Under `torchrun --nproc-per-node N -m glmcheck <command> --tp N`, each rank builds only its
shard of the model (`glmcheck.model.sharding`), the checks run on every rank (collectives need
all of them), captured per-head tensors are gathered to every rank in rank order, and only rank
0 prints, shows progress and writes records. NCCL on CUDA (one GPU per rank, `LOCAL_RANK`),
gloo on the CPU (used by the tests). Outside torchrun nothing here is active.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistContext:
    """This process's place in the job."""

    rank: int
    world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


_current: DistContext | None = None


def launched_by_torchrun() -> bool:
    """True when torchrun's environment (WORLD_SIZE > 1) is present."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def init_from_env(tp: int, device: str | None = None) -> DistContext:
    """Join the process group torchrun set up; the TP degree must equal the world size."""
    global _current
    world = int(os.environ["WORLD_SIZE"])
    if tp != world:
        raise ValueError(f"--tp {tp} must equal the torchrun world size {world} (one rank per TP shard)")
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available() and (device is None or device.startswith("cuda"))
    if use_cuda:
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if use_cuda else "gloo")
    _current = DistContext(rank, world, torch.device("cuda", local_rank) if use_cuda else torch.device("cpu"))
    return _current


def current() -> DistContext | None:
    """The active context, or None in a single process."""
    return _current


def shutdown() -> None:
    """Leave the process group (end of a torchrun command)."""
    global _current
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    _current = None


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """In-place sum over ranks (the TP all-reduce after o_proj and the MLPs)."""
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def gather_heads(tensor: torch.Tensor, ctx: DistContext) -> torch.Tensor:
    """[T, H/N, D] per rank -> [T, H, D] on every rank, heads in rank order."""
    local = tensor.to(ctx.device).contiguous()
    parts = [torch.empty_like(local) for _ in range(ctx.world_size)]
    dist.all_gather(parts, local)
    return torch.cat(parts, dim=1).to(tensor.device)
