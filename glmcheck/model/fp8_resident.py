"""FP8 weights resident in a transformers model: a module's block-FP8 weight stays e4m3 codes and fp32 block scales
in memory and is dequantised just in time, each time the module reads it, into a transient bf16 tensor that is
freed once the module's forward has used it.

Built on torch's public parametrization API (`torch.nn.utils.parametrize`): the codes are the parameter's
`original`, `BlockDequantize` (holding the scales) computes `module.weight` from them on every access, so
transformers' own `nn.Linear.forward` and its fused-expert forwards (`experts.gate_up_proj` [E, 2I, H],
`experts.down_proj` [E, H, I], any experts implementation) run unchanged on bf16 weights, bit for bit those of a
bf16 load (`fp8_codes`). An expert stack's forward runs inside `parametrize.cached()`, so each stack is
dequantised once per forward even where the eager implementation indexes it per expert; at most one module's
weights are held in bf16 at a time (`memory.fp8_terms`, "transient").

transformers' own FineGrainedFP8 modules (`FP8Linear`, `FP8Experts`) hold the same codes and `weight_scale_inv`
but multiply with activations quantised to FP8 as well: other numbers than the bf16 path's, so not used here.
"""

from __future__ import annotations

import functools

import torch
from torch import nn
from torch.nn.utils import parametrize

from glmcheck.model.fp8_codes import BlockFP8, dequantize_codes, regular_columns


class BlockDequantize(nn.Module):
    """The parametrization of one block-FP8 tensor: codes -> bf16 (`fp8_codes.dequantize_codes`).
    Buffers: `weight_scale_inv` [..., nR, nC] fp32 (the checkpoint's name), `rows` / `cols` the scale maps."""

    def __init__(self, weight: BlockFP8, device: torch.device, dtype: torch.dtype = torch.bfloat16):
        super().__init__()
        self.register_buffer("weight_scale_inv", weight.scale.to(device))
        self.register_buffer("rows", weight.rows.to(device), persistent=False)
        self.register_buffer("cols", weight.cols.to(device), persistent=False)
        self.regular = regular_columns(weight.cols, weight.block[1])
        self.block = weight.block
        self.dtype = dtype

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        return dequantize_codes(codes, self.weight_scale_inv, self.rows, self.cols, self.regular, self.block[1],
                                self.dtype)


def hold(module: nn.Module, name: str, weight: BlockFP8, device: torch.device) -> None:
    """Make `module.<name>` the resident block-FP8 `weight` (codes and scales moved to `device`)."""
    setattr(module, name, nn.Parameter(weight.codes.to(device), requires_grad=False))
    parametrize.register_parametrization(module, name, BlockDequantize(weight, torch.device(device)), unsafe=True)
    cls = type(module)  # the class parametrize made for this module alone
    if name in ("gate_up_proj", "down_proj") and not getattr(cls, "_glmcheck_cached", False):
        cls.forward = _cached(cls.forward)
        cls._glmcheck_cached = True


def _cached(forward):
    """`forward` with every parametrized tensor it reads dequantised once (freed when it returns or raises)."""
    @functools.wraps(forward)
    def run(self, *args, **kwargs):
        with parametrize.cached():
            return forward(self, *args, **kwargs)
    return run


def resident_tensors(model: nn.Module) -> dict[str, BlockDequantize]:
    """Every resident block-FP8 tensor of `model` by its name (`...kv_b_proj.weight`), with its parametrization."""
    found = {}
    for prefix, module in model.named_modules():
        if parametrize.is_parametrized(module):
            for name, chain in module.parametrizations.items():
                for step in chain:
                    if isinstance(step, BlockDequantize):
                        found[f"{prefix}.{name}" if prefix else name] = step
    return found


def is_resident(model: nn.Module) -> bool:
    """Whether any weight of `model` is held as block-FP8 codes."""
    return bool(resident_tensors(model))


@torch.no_grad()
def to_bf16(model: nn.Module) -> nn.Module:
    """`model` with every resident weight replaced, in place, by its bf16 value: what a bf16 load of the same
    checkpoint holds (the twin the just-in-time dequantisation is timed against)."""
    for name in list(resident_tensors(model)):
        owner_name, _, leaf = name.rpartition(".")
        owner = model.get_submodule(owner_name)
        value = getattr(owner, leaf)
        parametrize.remove_parametrizations(owner, leaf, leave_parametrized=False)
        setattr(owner, leaf, nn.Parameter(value))
    return model


def held_bytes(model: nn.Module) -> dict[str, int]:
    """Bytes `model` holds, counted from its tensors: "codes" (e4m3), "scales" (block scales and their maps), "dense"
    (everything else: bf16 weights, fp32 routers, norms, buffers); "total" their sum."""
    scale_ids = {id(t) for step in resident_tensors(model).values() for t in step.buffers()}
    counts = {"codes": 0, "scales": 0, "dense": 0}
    seen = set()
    for tensor in [*model.parameters(), *model.buffers()]:
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        kind = "codes" if tensor.dtype == torch.float8_e4m3fn else "scales" if id(tensor) in scale_ids else "dense"
        counts[kind] += tensor.numel() * tensor.element_size()
    counts["total"] = sum(counts.values())
    return counts
