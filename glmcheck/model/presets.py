"""GLM-5.x model presets (transformers' `GlmMoeDsaConfig`) and geometry overrides.

Presets:
- `glm-5`, `glm-5.1`: the published geometry: hidden 6144, 78 layers, 64 heads, q_lora 2048,
  kv_lora 512, nope 192 + rope 64, v 256, index_topk 2048 with 32 index heads of 128, 256
  routed experts (top-8) + 1 shared, moe_intermediate 2048, first 3 layers dense, vocab 154880,
  rope theta 1e6, every layer runs its own indexer.
- `glm-5.2`: as GLM-5.1 but rope theta 8e6, 1,048,576 positions, and the indexer on a
  schedule (`index_topk_freq` 4, offset 3): 21 "full" layers run the indexer, 57 "shared"
  layers reuse the previous full layer's top-k.
- `tiny`: the same architecture scaled down for the CPU: hidden 256, 3 layers (full, shared,
  full indexer; first layer dense), 8 heads, latent 64 + rope 16 (a kernel-legal 64 + 16 row),
  nope 32, v 32, 4 experts top-2 + 1 shared, index_topk 32, vocab 512.
Overrides keep the attention geometry: `layers` (the indexer schedule and dense prefix are
recomputed for the new depth) and `experts` (routed experts; top-k capped at that number).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported by make_config: the preset names and descriptions are read without transformers
    from transformers import GlmMoeDsaConfig

_GLM5_BASE = dict(
    vocab_size=154880, hidden_size=6144, intermediate_size=12288, moe_intermediate_size=2048,
    num_hidden_layers=78, num_attention_heads=64, num_key_value_heads=64, n_shared_experts=1,
    n_routed_experts=256, num_experts_per_tok=8, kv_lora_rank=512, q_lora_rank=2048,
    qk_rope_head_dim=64, v_head_dim=256, qk_nope_head_dim=192, index_topk=2048,
    index_head_dim=128, index_n_heads=32, first_k_dense_replace=3, max_position_embeddings=202752,
    rms_norm_eps=1e-5, routed_scaling_factor=2.5, norm_topk_prob=True, n_group=1, topk_group=1,
)


@dataclass(frozen=True)
class Preset:
    """A named geometry: config fields plus the indexer schedule (freq, offset)."""

    name: str
    description: str
    fields: dict = field(default_factory=dict)
    rope_theta: float = 1e6
    index_topk_freq: int = 1
    index_skip_topk_offset: int = 2


PRESETS: dict[str, Preset] = {
    "glm-5": Preset("glm-5", "GLM-5 published geometry (78 layers, 64 heads, 256 experts; rope theta 1e6)",
                    dict(_GLM5_BASE)),
    "glm-5.1": Preset("glm-5.1", "GLM-5.1: the GLM-5 geometry (rope theta 1e6)", dict(_GLM5_BASE)),
    "glm-5.2": Preset("glm-5.2", "GLM-5.2: GLM-5 geometry, rope theta 8e6, 1M positions, indexer every 4th "
                      "layer after the first 3 (21 full / 57 shared)",
                      dict(_GLM5_BASE, max_position_embeddings=1048576), rope_theta=8e6,
                      index_topk_freq=4, index_skip_topk_offset=3),
    "tiny": Preset("tiny", "CPU-sized GLM-MoE-DSA: hidden 256, 3 layers (full/shared/full indexer), 8 heads, "
                   "latent 64 + rope 16, 4 experts, index_topk 32, vocab 512",
                   dict(vocab_size=512, hidden_size=256, intermediate_size=512, moe_intermediate_size=64,
                        num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=8, n_shared_experts=1,
                        n_routed_experts=4, num_experts_per_tok=2, kv_lora_rank=64, q_lora_rank=96,
                        qk_rope_head_dim=16, v_head_dim=32, qk_nope_head_dim=32, index_topk=32,
                        index_head_dim=32, index_n_heads=4, first_k_dense_replace=1,
                        max_position_embeddings=4096, rms_norm_eps=1e-5, routed_scaling_factor=2.5,
                        norm_topk_prob=True, n_group=1, topk_group=1),
                   rope_theta=1e4, index_topk_freq=2, index_skip_topk_offset=1),
}


def preset_names() -> list[str]:
    return list(PRESETS)


def indexer_schedule(num_layers: int, freq: int, offset: int) -> list[str]:
    """"full" or "shared" per layer: full when max(i - offset + 1, 0) is a multiple of freq."""
    freq = max(freq, 1)
    return ["full" if max(i - offset + 1, 0) % freq == 0 else "shared" for i in range(num_layers)]


def make_config(preset: str, *, layers: int | None = None, experts: int | None = None) -> GlmMoeDsaConfig:
    """The transformers config of `preset` with optional depth / expert-count overrides."""
    from transformers import GlmMoeDsaConfig

    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; expected one of {', '.join(PRESETS)}")
    spec = PRESETS[preset]
    fields = dict(spec.fields)
    if layers is not None:
        if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
            raise ValueError(f"layers must be a positive int, got {layers!r}")
        fields["num_hidden_layers"] = layers
    if experts is not None:
        if isinstance(experts, bool) or not isinstance(experts, int) or experts < 1:
            raise ValueError(f"experts must be a positive int, got {experts!r}")
        fields["n_routed_experts"] = experts
        fields["num_experts_per_tok"] = min(fields["num_experts_per_tok"], experts)
    num_layers = fields["num_hidden_layers"]
    schedule = indexer_schedule(num_layers, spec.index_topk_freq, spec.index_skip_topk_offset)
    config = GlmMoeDsaConfig(
        **fields,
        indexer_types=schedule,
        rope_parameters={"rope_type": "default", "rope_theta": spec.rope_theta},
        tie_word_embeddings=False,
    )
    config.glmcheck_preset = preset
    return config
