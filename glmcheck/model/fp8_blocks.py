"""Block-wise FP8 (e4m3) weight quantisation, as DeepSeek/GLM FP8 checkpoints store it.

A weight [R, C] is split into b x b blocks (b = 128); each block has one fp32 scale
`weight_scale_inv` = amax(block) / 448, and the stored weight is round(weight / scale) in e4m3.
Leading dimensions (a stack of expert matrices [E, R, C]) are blocks of their own matrix each.
"""

from __future__ import annotations

import torch

FP8_MAX = torch.finfo(torch.float8_e4m3fn).max
BLOCK = 128


def quantize_blocks(weight: torch.Tensor, block: int = BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """weight [..., R, C] -> (e4m3 weight [..., R, C], fp32 scale_inv [..., ceil(R/b), ceil(C/b)]), on the
    weight's device. Transient memory: three fp32 copies of the weight (callers chunk large stacks)."""
    *lead, rows, cols = weight.shape
    grid_r, grid_c = -(-rows // block), -(-cols // block)
    padded = torch.zeros(*lead, grid_r * block, grid_c * block, dtype=torch.float32, device=weight.device)
    padded[..., :rows, :cols] = weight.float()
    tiles = padded.view(*lead, grid_r, block, grid_c, block)
    scale = tiles.abs().amax(dim=(-3, -1)).clamp_min(1e-12) / FP8_MAX
    quantised = (tiles / scale[..., :, None, :, None]).to(torch.float8_e4m3fn)
    return quantised.view(*lead, grid_r * block, grid_c * block)[..., :rows, :cols].contiguous(), scale


def dequantize_blocks(weight: torch.Tensor, scale_inv: torch.Tensor,
                      block: tuple[int, int] = (BLOCK, BLOCK)) -> torch.Tensor:
    """Block-FP8 weight [R, C] with scales [ceil(R/b0), ceil(C/b1)] -> fp32 weight [R, C]."""
    rows, cols = weight.shape
    if scale_inv.shape != (-(-rows // block[0]), -(-cols // block[1])):
        raise ValueError(f"scale_inv must have shape [{-(-rows // block[0])}, {-(-cols // block[1])}] for a "
                         f"{rows}x{cols} weight in {block[0]}x{block[1]} blocks, got {tuple(scale_inv.shape)}")
    full = scale_inv.float().repeat_interleave(block[0], 0)[:rows].repeat_interleave(block[1], 1)[:, :cols]
    return weight.float() * full
