"""The FP8 KV pool as engines store it for DSA models: DeepSeek-V3.2's FP8 sparse layout.

Per token, `pool_bytes(d_qk, d_rope)` bytes (656 for GLM-5.x's 512 + 64): the `d_qk - d_rope` latent values as
float8_e4m3fn, then one fp32 scale per tile of TILE latent values (a latent narrower than TILE is one tile), then
the `d_rope` rope values as bf16, not quantised (FlashMLA's `flash_mla_interface.py` and `tests/quant.py`,
SGLang's `nsa/quant_k_cache.py`). A tile's scale is its amax / 448 (e4m3's largest value), at least 1e-4, rounded
up to a power of two by default (`pow2_scales`, as FlashMLA's reference quantiser does; UE8M0); a value is stored
as value / scale cast to e4m3 (round to nearest even). The pool is paged: [ceil(S / block), block, 1, bytes] uint8,
rows past S in the last page zero. Dequantising gives bf16(e4m3 value x scale) and the rope bits unchanged: the
rows a bf16 kernel sees behind an FP8 cache (the engines' RAGGED transform).
"""

from __future__ import annotations

import functools
import math

import torch

TILE = 128  # latent values per fp32 scale
E4M3_MAX = 448.0
SCALE_FLOOR = 1e-4  # the smallest scale (FlashMLA's reference: its FP8 amax margin)
PAGE = 64  # tokens a page (a block of the paged pool)


def pool_bytes(d_qk: int, d_rope: int) -> int:
    """Bytes a token takes in the pool: latent e4m3 + fp32 scales + bf16 rope (656 for 576 = 512 + 64)."""
    latent = d_qk - d_rope
    return latent + 4 * math.ceil(latent / TILE) + 2 * d_rope


def _check_rows(kv: object, d_rope: int) -> torch.Tensor:
    if not isinstance(kv, torch.Tensor):
        raise TypeError(f"kv must be a torch.Tensor [S, d_qk] bf16, got {type(kv).__name__}")
    if kv.dim() == 3 and kv.shape[1] == 1:
        kv = kv[:, 0]
    if kv.dim() != 2:
        raise ValueError(f"kv must have shape [S, d_qk] or [S, 1, d_qk], got {tuple(kv.shape)}")
    if kv.dtype != torch.bfloat16:
        raise TypeError(f"kv must be torch.bfloat16, got {kv.dtype}")
    if isinstance(d_rope, bool) or not isinstance(d_rope, int) or not 0 <= d_rope < kv.shape[1]:
        raise ValueError(f"d_rope must be an int in [0, {kv.shape[1]}) (the rope values at the end of a row), "
                         f"got {d_rope!r}")
    return kv


def quantize_kv_pool(kv: torch.Tensor, *, d_rope: int = 64, block: int = PAGE, pow2_scales: bool = True
                     ) -> torch.Tensor:
    """KV rows [S, d_qk] bf16 (or [S, 1, d_qk]) as the paged FP8 pool [ceil(S / block), block, 1,
    pool_bytes(d_qk, d_rope)] uint8 on kv's device (module docstring)."""
    kv = _check_rows(kv, d_rope)
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ValueError(f"block must be a positive int (tokens a page), got {block!r}")
    rows, d_qk = kv.shape
    latent = d_qk - d_rope
    tiles = math.ceil(latent / TILE)
    pages = max(math.ceil(rows / block), 1) if rows else 0
    padded = torch.zeros((pages * block, d_qk), dtype=torch.bfloat16, device=kv.device)
    padded[:rows] = kv
    values = padded[:, :latent].float()
    bounds = torch.zeros((pages * block, tiles), dtype=torch.float32, device=kv.device)
    codes = torch.empty((pages * block, latent), dtype=torch.float8_e4m3fn, device=kv.device)
    for tile in range(tiles):
        part = values[:, tile * TILE:(tile + 1) * TILE]
        scale = (part.abs().amax(dim=1) / E4M3_MAX).clamp_min(SCALE_FLOOR)
        if pow2_scales:
            scale = torch.pow(2.0, scale.log2().ceil())
        bounds[:, tile] = scale
        codes[:, tile * TILE:(tile + 1) * TILE] = (part / scale[:, None]).to(torch.float8_e4m3fn)
    pool = torch.empty((pages * block, pool_bytes(d_qk, d_rope)), dtype=torch.uint8, device=kv.device)
    pool[:, :latent] = codes.view(torch.uint8)
    pool[:, latent:latent + 4 * tiles] = bounds.view(torch.uint8)
    pool[:, latent + 4 * tiles:] = padded[:, latent:].contiguous().view(torch.uint8)
    return pool.view(pages, block, 1, pool.shape[1])


@functools.cache
def latent_width(width: int, d_rope: int) -> int | None:
    """The latent values a pool row of `width` bytes holds beside its scales and `d_rope` bf16 rope values, or None
    when no latent fits (latent + 4 * ceil(latent / TILE) grows strictly, so at most one does)."""
    rest = width - 2 * d_rope
    for tiles in range(max(rest, 0) // TILE + 2):
        latent = rest - 4 * tiles
        if latent >= 0 and math.ceil(latent / TILE) == tiles:
            return latent
    return None


def check_pool(pool: object, num_rows: object, d_rope: object) -> tuple[int, int]:
    """Check a pool `quantize_kv_pool` wrote ([pages, block, 1, bytes] uint8), the rows read from it (an int in
    [0, pages * block]) and `d_rope` (an int >= 0); returns (latent values a row, scale tiles a row). ValueError
    naming the argument otherwise."""
    if not isinstance(pool, torch.Tensor) or pool.dtype != torch.uint8 or pool.dim() != 4 or pool.shape[2] != 1:
        raise ValueError(f"pool must be a uint8 tensor [pages, block, 1, bytes], got "
                         f"{getattr(pool, 'dtype', type(pool).__name__)} {tuple(getattr(pool, 'shape', ()))}")
    pages, block, _, width = pool.shape
    if isinstance(num_rows, bool) or not isinstance(num_rows, int) or not 0 <= num_rows <= pages * block:
        raise ValueError(f"num_rows must be an int in [0, {pages * block}] (the pool's rows), got {num_rows!r}")
    if isinstance(d_rope, bool) or not isinstance(d_rope, int) or d_rope < 0:
        raise ValueError(f"d_rope must be an int >= 0 (the bf16 rope values at the end of a row), got {d_rope!r}")
    latent = latent_width(width, d_rope)
    if latent is None:
        raise ValueError(f"pool rows of {width} bytes hold no latent + scales + {d_rope} bf16 rope values "
                         f"(d_rope={d_rope})")
    return latent, math.ceil(latent / TILE)


def dequantize_kv_pool(pool: torch.Tensor, num_rows: int, *, d_rope: int = 64) -> torch.Tensor:
    """The first `num_rows` rows of a pool `quantize_kv_pool` wrote, [num_rows, d_qk] bf16 (module docstring):
    each latent value bf16(fp32(code) x fp32 scale), rounded once to nearest even; the rope bits copied."""
    latent, tiles = check_pool(pool, num_rows, d_rope)
    pages, block, _, width = pool.shape
    flat = pool.reshape(pages * block, width)[:num_rows]
    codes = flat[:, :latent].contiguous().view(torch.float8_e4m3fn).float()
    scales = flat[:, latent:latent + 4 * tiles].contiguous().view(torch.float32)
    rope = flat[:, latent + 4 * tiles:].contiguous().view(torch.bfloat16)
    out = torch.empty((num_rows, latent + d_rope), dtype=torch.bfloat16, device=pool.device)
    for tile in range(tiles):
        end = min((tile + 1) * TILE, latent)
        out[:, tile * TILE:end] = codes[:, tile * TILE:end] * scales[:, tile:tile + 1]
    out[:, latent:] = rope
    return out
