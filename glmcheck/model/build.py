"""Build a GLM-MoE-DSA model (`GlmMoeDsaForCausalLM`) with seeded dummy weights.

The model is constructed directly on the target device with transformers' weight init turned
off (`transformers.initialization.no_init_weights`), in bf16 except the modules transformers
keeps in fp32 (the router weight and score-correction bias), then every
parameter is filled from its per-name seed (`glmcheck.model.weights`).
"""

from __future__ import annotations

import contextlib
import re

import torch
from transformers import GlmMoeDsaConfig, GlmMoeDsaForCausalLM
from transformers.initialization import no_init_weights

from glmcheck.model.weights import fill_dummy_weights

# transformers' `_keep_in_fp32_modules_strict` for this model (kept fp32 in bf16 models too);
# `indexer.weights_proj` is only kept in fp32 for fp16 models, so it is bf16 here, as
# `from_pretrained(dtype=torch.bfloat16)` gives.
FP32_PATTERNS = (r"\.gate\.weight$", r"e_score_correction_bias$")


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype):
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def keep_fp32(model: torch.nn.Module) -> None:
    """Cast the parameters/buffers transformers keeps in fp32 for this model to fp32."""
    for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
        if any(re.search(p, name) for p in FP32_PATTERNS) and tensor.dtype != torch.float32:
            tensor.data = tensor.data.float()


def build_dummy_model(config: GlmMoeDsaConfig, *, seed: int = 0, init: str = "hf",
                      device: torch.device | str = "cpu", dtype: torch.dtype = torch.bfloat16,
                      attn_implementation: str = "sdpa") -> GlmMoeDsaForCausalLM:
    """A GlmMoeDsaForCausalLM on `device` with seeded dummy weights, in eval mode."""
    device = torch.device(device)
    config._attn_implementation = attn_implementation
    with torch.device(device), _default_dtype(dtype), no_init_weights():
        model = GlmMoeDsaForCausalLM(config)
    keep_fp32(model)
    fill_dummy_weights(model, seed, init)
    return model.eval()
