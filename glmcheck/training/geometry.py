"""The trained models (ref-cpu, ref-gpu): their geometry (a `GlmMoeDsaConfig`) and training recipe.

- `ref-cpu`: the `tiny` preset's attention geometry (8 heads, latent 64 + rope 16, nope 32,
  v 32, index_topk 32, indexer full/shared/full) with a 2,048-id tokenizer, trained at 512
  tokens so most tokens attend sparsely. Small enough for the CPU interpreter.
- `ref-gpu`: the kernel's geometry: 8 heads per call (a TP8 slice of GLM-5.x), kv_lora_rank
  512 + rope 64 (d_qk 576, d_v 512), index_topk 2048 with 8 index heads of 128, GLM-5.2's
  indexer schedule rule (freq 4, offset 3: layers full, full, full, shared), trained at 4,096
  tokens so half of every sequence attends sparsely. nope 64 and v 96 (not GLM's 192 / 256: the
  kernel never sees them) keep the bf16 checkpoint under 40 MB.
Both have a dense layer 0 (layer-0 loading needs one) and MoE layers after it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from transformers import GlmMoeDsaConfig

from glmcheck.model.presets import PRESETS, indexer_schedule


@dataclass(frozen=True)
class Recipe:
    """How a trained model is trained: sequence length, sequences per step, steps per stage
    (dense warm-up, then sparse), peak learning rate, evaluation cadence."""

    seq_len: int
    batch: int
    dense_steps: int
    sparse_steps: int
    lr: float = 2e-3
    weight_decay: float = 0.1
    warmup_steps: int = 50
    eval_every: int = 100
    eval_windows: int = 16
    check_len: int = 512  # length of the fixture check windows (tests recompute this loss on the CPU)
    check_windows: int = 4
    dense_seq_len: int | None = None  # the dense warm-up's own length and batch (None: seq_len, batch); at or
    dense_batch: int | None = None  # below index_topk every selection is the whole prefix, i.e. dense anyway
    kl_query_stride: int = 1  # the indexer KL over every n-th query row (offset by the step): 1/n of its cost
    micro_batch: int | None = None  # sequences per forward (None: the whole batch); the gradient is the same
    balance_rate: float = 1e-2  # router score-correction bias step per update (aux-loss-free balancing)


    def shape(self, stage: str) -> tuple[int, int]:
        """(sequence length, sequences per step) of `stage` ("dense" or "sparse")."""
        if stage == "dense":
            return self.dense_seq_len or self.seq_len, self.dense_batch or self.batch
        return self.seq_len, self.batch

    def tokens_after(self, steps: int) -> int:
        """Training tokens read by the first `steps` steps."""
        dense, sparse = min(steps, self.dense_steps), max(0, steps - self.dense_steps)
        return dense * math.prod(self.shape("dense")) + sparse * math.prod(self.shape("sparse"))


@dataclass(frozen=True)
class TrainedGeometry:
    """A named trained model: config fields, indexer schedule rule, tokenizer size, recipe."""

    name: str
    description: str
    fields: dict
    vocab_size: int
    schedule: tuple[int, int]  # (index_topk_freq, index_skip_topk_offset)
    rope_theta: float
    recipe: Recipe
    fixture: str  # folder under glmcheck/data/resources/trained_models/

    def config(self, vocab_size: int | None = None) -> GlmMoeDsaConfig:
        fields = dict(self.fields, vocab_size=vocab_size or self.vocab_size)
        config = GlmMoeDsaConfig(
            **fields, indexer_types=indexer_schedule(fields["num_hidden_layers"], *self.schedule),
            rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta},
            tie_word_embeddings=False, bos_token_id=0, eos_token_id=1, pad_token_id=2)
        config.glmcheck_reference = self.name  # the field name in the shipped config.json (part of config_hash)
        return config


_TINY = PRESETS["tiny"]
TRAINED_GEOMETRIES: dict[str, TrainedGeometry] = {
    "ref-cpu": TrainedGeometry(
        "ref-cpu", "trained CPU-sized GLM-MoE-DSA at the tiny geometry (8 heads, latent 64 + rope 16, "
        "index_topk 32, 3 layers full/shared/full, 4 experts), 2,048-id BPE tokenizer",
        dict(_TINY.fields), 2048, (_TINY.index_topk_freq, _TINY.index_skip_topk_offset), _TINY.rope_theta,
        Recipe(seq_len=512, batch=16, dense_steps=400, sparse_steps=1600, lr=3e-3, eval_every=200, check_len=384),
        "ref-cpu"),
    "ref-gpu": TrainedGeometry(
        "ref-gpu", "trained GLM-MoE-DSA at the kernel's geometry: 8 heads (a TP8 slice), latent 512 + rope 64, "
        "index_topk 2048, GLM-5.2 indexer schedule (full, full, full, shared), 8 experts; 4,096-id BPE",
        dict(hidden_size=384, intermediate_size=768, moe_intermediate_size=96, num_hidden_layers=4,
             num_attention_heads=8, num_key_value_heads=8, n_shared_experts=1, n_routed_experts=8,
             num_experts_per_tok=2, kv_lora_rank=512, q_lora_rank=192, qk_rope_head_dim=64, v_head_dim=96,
             qk_nope_head_dim=64, index_topk=2048, index_head_dim=128, index_n_heads=8, first_k_dense_replace=1,
             max_position_embeddings=65536, rms_norm_eps=1e-5, routed_scaling_factor=2.5, norm_topk_prob=True,
             n_group=1, topk_group=1),
        4096, (4, 3), 1e6,
        Recipe(seq_len=4096, batch=4, dense_steps=700, sparse_steps=150, lr=3e-3, warmup_steps=50, eval_every=100,
               eval_windows=8, check_len=3072, check_windows=1, micro_batch=4, kl_query_stride=4,
               dense_seq_len=1024, dense_batch=16),
        "ref-gpu"),
}


def trained_geometry(name: str) -> TrainedGeometry:
    if name not in TRAINED_GEOMETRIES:
        raise ValueError(f"unknown trained model {name!r}; expected one of {', '.join(TRAINED_GEOMETRIES)}")
    return TRAINED_GEOMETRIES[name]
