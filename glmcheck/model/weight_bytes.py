"""Bytes of weights one tensor-parallel rank holds, exactly, from the module shapes (the model laid out on the meta
device) and the sharding rules, in either format a check can hold them in (`--weights`):

- "bf16": every tensor in bf16 (the routers and their score-correction biases in fp32), an FP8 checkpoint
  dequantised at load;
- "fp8": the tensors a GLM-5.x FP8 checkpoint stores in FP8 (`fp8_export.held_in_fp8`) as e4m3 codes (1 byte) and
  fp32 block scales (4 bytes a 128 x 128 block the rank's cut reads, the most any rank reads, plus the int32 scale
  maps of `fp8_codes`), the rest as under "bf16"; and the transient of the just-in-time dequantisation
  (`fp8_resident`): the largest module's FP8 tensors in bf16 at once (an MoE layer's two expert stacks), its fp32
  workspace (`fp8_codes.dequantize_codes`: two chunks, plus one scale row per code row and scale column).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from transformers import GlmMoeDsaConfig

from glmcheck.model.fp8_blocks import BLOCK
from glmcheck.model.fp8_codes import CHUNK_ELEMENTS
from glmcheck.model.fp8_export import held_in_fp8
from glmcheck.model.sharding import cut_kind, full_shapes

WEIGHT_FORMATS = ("bf16", "fp8")
FP32_SUFFIXES = ("mlp.gate.weight", "e_score_correction_bias")


@dataclass(frozen=True)
class RankWeights:
    """One rank's weights: parameter counts, bytes per layer and outside the layers (embedding, final norm,
    lm_head), the split by kind, and the transient of the FP8 format (0 under bf16)."""

    weights: str
    params_total: int
    params_per_rank: int
    layer_bytes: list[int]
    other_bytes: int
    codes: int = 0
    scales: int = 0
    dense: int = 0
    transient_by_layer: list[int] = field(default_factory=list)

    @property
    def held(self) -> int:
        return sum(self.layer_bytes) + self.other_bytes

    def transient(self, layers: int | None = None) -> int:
        """The largest module's dequantised weights and workspace among the first `layers` layers (all: None)."""
        kept = self.transient_by_layer[:layers] if layers is not None else self.transient_by_layer
        return max(kept, default=0)


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _touched(length: int, world: int, block: int) -> int:
    """The most blocks of `block` any rank's cut [r n / w, (r + 1) n / w) of `length` reads."""
    width = length // world
    return max((r * width + width - 1) // block - (r * width) // block + 1 for r in range(world))


def fp8_bytes(name: str, shape, tp: int, block: int = BLOCK) -> tuple[int, int]:
    """(codes, scales) bytes of rank's cut of the FP8 tensor `name` [..., R, C] (scales: the most any rank holds,
    with the int32 scale maps); a fused gate_up stack's gate and up rows are blocks of their own."""
    kind = cut_kind(name) if tp > 1 else None
    *lead, rows, cols = shape
    experts = _numel(lead)
    parts = 2 if kind == "gate_up" or name.endswith("gate_up_proj") else 1
    part_rows = rows // parts
    row_cut = tp if kind in ("rows", "gate_up") else 1
    col_cut = tp if kind in ("cols", "experts_cols") else 1
    scale_rows = parts * _touched(part_rows, row_cut, block)
    scale_cols = _touched(cols, col_cut, block)
    codes = experts * (rows // row_cut) * (cols // col_cut)
    maps = 4 * (rows // row_cut + cols // col_cut)
    return codes, 4 * experts * scale_rows * scale_cols + maps


_KEPT: dict[tuple[str, int, str], RankWeights] = {}  # the last few answers: a plan asks for each attention path


def rank_weights(config: GlmMoeDsaConfig, tp: int, weights: str = "bf16") -> RankWeights:
    """Rank 0's weights of `config` at TP degree `tp` in format `weights` (see the module docstring)."""
    if weights not in WEIGHT_FORMATS:
        raise ValueError(f"weights must be one of {', '.join(WEIGHT_FORMATS)}, got {weights!r}")
    key = (config.to_json_string(), tp, weights)
    if key not in _KEPT:
        if len(_KEPT) >= 8:
            _KEPT.pop(next(iter(_KEPT)))
        _KEPT[key] = _count(config, tp, weights)
    return _KEPT[key]


def _count(config: GlmMoeDsaConfig, tp: int, weights: str) -> RankWeights:
    total = per_rank = other = codes = scales = dense = 0
    layers = [0] * config.num_hidden_layers
    module_bf16: dict[str, int] = {}
    module_largest: dict[str, int] = {}
    for name, shape in full_shapes(config).items():
        count = _numel(shape)
        mine = count // tp if cut_kind(name) is not None else count
        total, per_rank = total + count, per_rank + mine
        if weights == "fp8" and held_in_fp8(name, shape):
            held_codes, held_scales = fp8_bytes(name, shape, tp)
            codes, scales, size = codes + held_codes, scales + held_scales, held_codes + held_scales
            module = name.rsplit(".", 1)[0]
            module_bf16[module] = module_bf16.get(module, 0) + 2 * mine
            module_largest[module] = max(module_largest.get(module, 0), mine)
        else:
            size = mine * (4 if name.endswith(FP32_SUFFIXES) else 2)
            dense += size
        if name.startswith("model.layers."):
            layers[int(name.split(".")[2])] += size
        else:
            other += size
    transient = [0] * config.num_hidden_layers
    for module, size in module_bf16.items():
        largest = module_largest[module]
        need = size + 8 * min(largest, CHUNK_ELEMENTS) + largest // 32
        if module.startswith("model.layers."):
            index = int(module.split(".")[2])
            transient[index] = max(transient[index], need)
    return RankWeights(weights, total, per_rank, layers, other, codes, scales, dense, transient)
