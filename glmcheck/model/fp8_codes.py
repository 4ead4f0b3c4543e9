"""A block-FP8 weight as it is held in memory (`BlockFP8`): e4m3 codes, their fp32 block scales, and which scale each
code row and column reads; cut for a tensor-parallel rank, fused from parts, and dequantised to bf16.

The bf16 value of a code is `bf16(float(code) * scale)`: one fp32 multiply, one rounding, the value load-time
dequantisation gives (`fp8_blocks.dequantize_blocks`, transformers' FineGrainedFP8 `dequantize=True`), so a weight
dequantised here, at any time and on any device, is bit for bit the one a bf16 load of the checkpoint holds.

Scale maps: `rows[r]` is the scale row code row r reads, `cols[c]` the scale column of code column c (int32, on the
CPU, non-decreasing). A whole checkpoint tensor has rows = arange(R) // 128; a cut keeps the scale blocks its codes
read, so a tensor-parallel cut need not fall on a 128 boundary (two ranks then both hold the block they share);
a fused expert stack is its gate rows then its up rows, each part in blocks of its own (as the files store them).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from glmcheck.model.fp8_blocks import BLOCK, quantize_blocks

CHUNK_ELEMENTS = 1 << 26  # codes dequantised per step: 256 MiB of fp32 temporaries (the transient beside the output)


def _span(count: int, block: int) -> torch.Tensor:
    return torch.arange(count, dtype=torch.int32) // block


@dataclass(frozen=True)
class BlockFP8:
    """codes [..., R, C] float8_e4m3fn; scale [..., nR, nC] fp32 (each matrix of a stack has its own);
    rows [R] / cols [C] int32 on the CPU (see the module docstring); block (b0, b1) the checkpoint's block size."""

    codes: torch.Tensor
    scale: torch.Tensor
    rows: torch.Tensor
    cols: torch.Tensor
    block: tuple[int, int] = (BLOCK, BLOCK)

    @classmethod
    def from_blocks(cls, codes: torch.Tensor, scale: torch.Tensor, block: tuple[int, int] = (BLOCK, BLOCK)) -> BlockFP8:
        """A whole tensor as a checkpoint stores it: codes [..., R, C], scale [..., ceil(R/b0), ceil(C/b1)].
        ValueError for codes that are not e4m3 or a scale of another shape."""
        if codes.dtype != torch.float8_e4m3fn:
            raise ValueError(f"block-FP8 codes must be float8_e4m3fn, got {codes.dtype}")
        rows, cols = codes.shape[-2:]
        need = (*codes.shape[:-2], -(-rows // block[0]), -(-cols // block[1]))
        if tuple(scale.shape) != need:
            raise ValueError(f"scale_inv must have shape {list(need)} for {list(codes.shape)} codes in "
                             f"{block[0]}x{block[1]} blocks, got {list(scale.shape)}")
        return cls(codes, scale.float(), _span(rows, block[0]), _span(cols, block[1]), tuple(block))

    @classmethod
    def quantize(cls, values: torch.Tensor, block: int = BLOCK) -> BlockFP8:
        """`values` [..., R, C] quantised in b x b blocks (`fp8_blocks.quantize_blocks`), on its device."""
        return cls.from_blocks(*quantize_blocks(values, block), (block, block))

    @property
    def shape(self) -> torch.Size:
        return self.codes.shape

    @property
    def nbytes(self) -> int:
        """Bytes held: codes, scales and the two maps."""
        return sum(t.numel() * t.element_size() for t in (self.codes, self.scale, self.rows, self.cols))

    def narrow(self, dim: int, start: int, length: int) -> BlockFP8:
        """Code rows (dim -2) or columns (dim -1) [start, start + length), with the scale blocks they read."""
        if dim not in (-2, -1):
            raise ValueError(f"dim must be -2 (rows) or -1 (columns), got {dim}")
        index = (self.rows if dim == -2 else self.cols)[start:start + length]
        first, last = int(index[0]), int(index[-1])
        codes = self.codes.narrow(dim, start, length)
        scale = self.scale.narrow(dim, first, last - first + 1)
        index = index - first
        rows, cols = (index, self.cols) if dim == -2 else (self.rows, index)
        return BlockFP8(codes, scale, rows, cols, self.block)

    @staticmethod
    def cat_rows(parts: list[BlockFP8]) -> BlockFP8:
        """The parts' rows one after the other (an expert's gate rows, then its up rows); same columns."""
        first = parts[0]
        for part in parts[1:]:
            if not torch.equal(part.cols, first.cols) or part.block != first.block:
                raise ValueError("cat_rows needs parts with the same columns and blocks")
        rows, total = [], 0
        for part in parts:
            rows.append(part.rows + total)
            total += part.scale.shape[-2]
        return BlockFP8(_join(torch.cat, [p.codes for p in parts], dim=-2),
                        torch.cat([p.scale for p in parts], dim=-2), torch.cat(rows), first.cols, first.block)

    @staticmethod
    def stack(items: list[BlockFP8], *, cat: bool = False) -> BlockFP8:
        """Matrices stacked along a new leading dimension (experts), or, with `cat`, stacks joined along theirs."""
        first = items[0]
        for item in items[1:]:
            if not (torch.equal(item.rows, first.rows) and torch.equal(item.cols, first.cols)):
                raise ValueError("stack needs matrices read with the same scale maps")
        join = torch.cat if cat else torch.stack
        return BlockFP8(_join(join, [i.codes for i in items]), join([i.scale for i in items]), first.rows, first.cols,
                        first.block)

    def cut(self, kind: str | None, rank: int, world: int) -> BlockFP8:
        """Rank `rank` of `world`'s part under a sharding rule (`glmcheck.model.sharding.cut_kind`): "rows",
        "cols", "gate_up" (the same rows of the gate half and of the up half), "experts_cols"; None keeps it whole."""
        if kind is None or world == 1:
            return self
        if kind in ("cols", "experts_cols"):
            width = self.shape[-1] // world
            return self.narrow(-1, rank * width, width)
        if kind == "rows":
            height = self.shape[-2] // world
            return self.narrow(-2, rank * height, height)
        if kind == "gate_up":
            half = self.shape[-2] // 2
            height = half // world
            return BlockFP8.cat_rows([self.narrow(-2, rank * height, height),
                                      self.narrow(-2, half + rank * height, height)])
        raise ValueError(f"unknown sharding rule {kind!r}")

    def compact(self) -> BlockFP8:
        """The same weight in tensors of its own (a cut is a view that would keep the whole tensor alive)."""
        return BlockFP8(self.codes.clone(), self.scale.clone(), self.rows.clone(), self.cols.clone(), self.block)

    def dequantize(self, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        """The weight in `dtype` (bf16: the values a bf16 load holds), on the codes' device."""
        device = self.codes.device
        return dequantize_codes(self.codes, self.scale, self.rows.to(device), self.cols.to(device),
                                regular_columns(self.cols, self.block[1]), self.block[1], dtype)


def _join(join, codes: list[torch.Tensor], **kwargs) -> torch.Tensor:
    """torch.cat / torch.stack of e4m3 codes, as their bytes (every backend joins uint8)."""
    return join([c.view(torch.uint8) for c in codes], **kwargs).view(torch.float8_e4m3fn)


_E4M3_VALUES: dict[torch.device, torch.Tensor] = {}


def decode_e4m3(codes: torch.Tensor) -> torch.Tensor:
    """fp32 values of e4m3 codes, torch's own conversion: on CUDA the cast itself; on the CPU, where torch's cast is
    not vectorised (~10 ns a code), a gather from the 256 values that cast gives (~16 x faster, the same bits)."""
    if codes.device.type == "cuda":
        return codes.float()
    table = _E4M3_VALUES.get(codes.device)
    if table is None:
        table = _E4M3_VALUES.setdefault(codes.device, torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn)
                                        .float().to(codes.device))
    index = codes.contiguous().view(torch.uint8).reshape(-1).to(torch.int32)
    return table.index_select(0, index).view(codes.shape)


def regular_columns(cols: torch.Tensor, block: int) -> bool:
    """Whether the columns are whole blocks in order (cols == arange(C) // block, C a multiple of block): the
    scales then broadcast over each block's columns instead of being expanded per column."""
    return cols.numel() % block == 0 and torch.equal(cols, _span(cols.numel(), block))


def dequantize_codes(codes: torch.Tensor, scale: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor,
                     regular: bool, block_cols: int, dtype: torch.dtype = torch.bfloat16,
                     chunk: int = CHUNK_ELEMENTS) -> torch.Tensor:
    """bf16(float(codes) * scale[rows[r], cols[c]]) for codes [..., R, C] (maps on the codes' device; `regular`:
    `regular_columns`). Computed `chunk` codes at a time: the fp32 temporaries stay within 2 x 4 x chunk bytes
    beside the output."""
    out = torch.empty(codes.shape, dtype=dtype, device=codes.device)
    height, width = codes.shape[-2:]
    if out.numel() == 0:
        return out
    flat_codes, flat_out = codes.reshape(-1, height, width), out.view(-1, height, width)
    scale_rows = scale.index_select(-2, rows).reshape(flat_codes.shape[0], height, -1)  # [n, R, nC]: 1/block of it
    matrices = flat_codes.shape[0]
    group = max(1, chunk // (height * width))
    step = height if group > 1 or height * width <= chunk else max(1, chunk // width)
    for m0 in range(0, matrices, group):
        m1 = min(matrices, m0 + group)
        for r0 in range(0, height, step):
            r1 = min(height, r0 + step)
            values = decode_e4m3(flat_codes[m0:m1, r0:r1])
            target = flat_out[m0:m1, r0:r1]
            scales = scale_rows[m0:m1, r0:r1]
            if regular:
                shape = (m1 - m0, r1 - r0, width // block_cols, block_cols)
                torch.mul(values.view(shape), scales.unsqueeze(-1), out=target.view(shape))
            else:
                torch.mul(values, scales.index_select(-1, cols), out=target)
    return out
