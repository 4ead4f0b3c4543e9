"""Dummy weights seeded per parameter: bit-identical across runs, processes and TP degrees.

Every tensor is generated whole, on the target device, from a seed derived from (global seed,
parameter name) by a stable hash (SHA-256), so a TP rank cuts its slice from the same whole
tensor the single-process build has. Values depend on the device type (CPU and CUDA generators
differ) but never on the process, the order of construction or the TP degree.

Init scales:
- `hf`: transformers' defaults: linear, embedding, expert and router weights N(0, 0.02);
  norm weights 1; biases and the router's score-correction bias 0.
- `sharp`: as `hf`, but q_b_proj, kv_b_proj and the MoE router use std SHARP_GAIN / sqrt(fan_in),
  so every query and key element has std ~SHARP_GAIN whatever the geometry: attention logits
  have a realistic spread (std ~2.5-3) instead of near-uniform attention over thousands of rows
  (hf: logit std ~0.04 on `tiny`; measured values in docs/models.md), and router logits have
  decisive margins instead of near-ties that flip experts on any rounding difference.
"""

from __future__ import annotations

import hashlib

import torch
from torch import nn

INIT_SCALES = ("hf", "sharp")
HF_STD = 0.02
SHARP_GAIN = 1.7
SHARP_PARAMS = ("self_attn.q_b_proj.weight", "self_attn.kv_b_proj.weight", "mlp.gate.weight")


def parameter_seed(global_seed: int, name: str) -> int:
    """A 63-bit seed from (global seed, parameter name), stable across processes and versions."""
    digest = hashlib.sha256(f"{global_seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def _kind(name: str, tensor: torch.Tensor) -> str:
    """'ones' for norm weights, 'zeros' for biases, else 'normal'."""
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "bias" or name.endswith("e_score_correction_bias"):
        return "zeros"
    if tensor.dim() == 1 and ("norm" in name):
        return "ones"
    return "normal"


def init_std(name: str, shape: torch.Size, init: str) -> float:
    """Standard deviation of a 'normal' tensor `name` of `shape` under `init`."""
    if init == "sharp" and name.endswith(SHARP_PARAMS):
        return SHARP_GAIN / shape[-1] ** 0.5
    return HF_STD


def seeded_tensor(name: str, shape: torch.Size, dtype: torch.dtype, device: torch.device,
                  global_seed: int, init: str) -> torch.Tensor:
    """The whole dummy tensor for parameter `name` (see module docstring)."""
    kind = _kind(name, torch.empty(shape, device="meta"))
    if kind == "ones":
        return torch.ones(shape, dtype=dtype, device=device)
    if kind == "zeros":
        return torch.zeros(shape, dtype=dtype, device=device)
    return seeded_normal(name, shape, device, global_seed, init).to(dtype)


def seeded_normal(name: str, shape: torch.Size, device: torch.device, global_seed: int, init: str) -> torch.Tensor:
    """The fp32 values of a 'normal' dummy tensor before its cast to the parameter's dtype (one fp32 copy)."""
    generator = torch.Generator(device=device).manual_seed(parameter_seed(global_seed, name))
    values = torch.randn(shape, generator=generator, dtype=torch.float32, device=device)
    return values.mul_(init_std(name, shape, init))


@torch.no_grad()
def fill_dummy_weights(model: nn.Module, global_seed: int, init: str = "hf") -> None:
    """Overwrite every parameter and persistent buffer of `model` with its seeded values."""
    if init not in INIT_SCALES:
        raise ValueError(f"init must be one of {', '.join(INIT_SCALES)}, got {init!r}")
    for name, tensor in list(model.named_parameters()) + _persistent_buffers(model):
        tensor.copy_(seeded_tensor(name, tensor.shape, tensor.dtype, tensor.device, global_seed, init))


def _persistent_buffers(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
    persistent = set(model.state_dict().keys())
    return [(n, b) for n, b in model.named_buffers() if n in persistent]
