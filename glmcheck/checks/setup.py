"""What every check needs before it runs: the device, validated backends, the model, a prompt.

Backends are validated before any model is built, so a bad choice costs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from glmcheck.backends.validation import validate_backend
from glmcheck.model import build_dummy_model, make_config
from glmcheck.model.presets import PRESETS
from glmcheck.model.weights import INIT_SCALES


@dataclass(frozen=True)
class ModelSpec:
    """Which model to build: a preset with dummy weights, or a local checkpoint."""

    preset: str = "tiny"
    checkpoint: str | None = None
    layers: int | None = None
    experts: int | None = None
    seed: int = 0
    init: str = "sharp"

    def describe(self) -> dict:
        return {"preset": None if self.checkpoint else self.preset, "checkpoint": self.checkpoint,
                "layers": self.layers, "experts": self.experts, "seed": self.seed,
                "init": None if self.checkpoint else self.init}


def resolve_device(name: str | None) -> torch.device:
    """`name` or, when None, CUDA if present else the CPU; ValueError for an unusable device."""
    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"device must be cpu or cuda[:N], got {name!r}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device cuda requested but no CUDA device is available")
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be cpu or cuda[:N], got {name!r}")
    return device


def heads_of(spec: ModelSpec) -> int:
    """Attention heads of the model `spec` describes (reads only the config)."""
    if spec.checkpoint:
        from glmcheck.model.checkpoint import read_config

        return read_config(spec.checkpoint).num_attention_heads
    if spec.preset not in PRESETS:
        raise ValueError(f"unknown preset {spec.preset!r}; expected one of {', '.join(PRESETS)}")
    return PRESETS[spec.preset].fields["num_attention_heads"]


def latent_dims_of(spec: ModelSpec) -> tuple[int, int]:
    """(kv_lora_rank, qk_rope_head_dim) of the model `spec` describes (reads only the config)."""
    if spec.checkpoint:
        from glmcheck.model.checkpoint import read_config

        config = read_config(spec.checkpoint)
    else:
        config = make_config(spec.preset, layers=1)
    return config.kv_lora_rank, config.qk_rope_head_dim


def validate_backends(names: list[str], *, device: torch.device, heads: int, tp: int,
                      deterministic: bool = False, latent_dims: tuple[int, int] | None = None) -> list[str]:
    """Validate the TP degree and every backend; returns warnings, raises ValueError/BackendError."""
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1 or heads % tp:
        raise ValueError(f"tp must be a positive int dividing the {heads} attention heads, got {tp!r}")
    if not names:
        raise ValueError("backends must name at least one backend")
    warnings: list[str] = []
    for name in dict.fromkeys(names):
        warnings += validate_backend(name, device=device, heads_per_rank=heads // tp, deterministic=deterministic,
                                     latent_dims=latent_dims)
    return list(dict.fromkeys(warnings))


def load_model(spec: ModelSpec, device: torch.device, *, layer0_only: bool = False) -> torch.nn.Module:
    """Build the model `spec` describes on `device` (layer0_only: one layer / partial loading).

    Under torchrun (glmcheck.distributed active) each rank builds only its TP shard.
    """
    from glmcheck import distributed

    if spec.init not in INIT_SCALES:
        raise ValueError(f"init must be one of {', '.join(INIT_SCALES)}, got {spec.init!r}")
    ctx = distributed.current()
    if ctx is not None:
        return _load_shard(spec, ctx, layer0_only)
    if spec.checkpoint:
        from glmcheck.model.checkpoint import load_checkpoint_model, load_layer0_model

        return (load_layer0_model if layer0_only else load_checkpoint_model)(spec.checkpoint, device=device)
    layers = 1 if layer0_only and spec.layers is None else spec.layers
    config = make_config(spec.preset, layers=layers, experts=spec.experts)
    return build_dummy_model(config, seed=spec.seed, init=spec.init, device=device)


def _load_shard(spec: ModelSpec, ctx, layer0_only: bool) -> torch.nn.Module:
    from glmcheck import distributed
    from glmcheck.model.sharding import build_shard

    if spec.checkpoint:
        from glmcheck.model.checkpoint_shard import load_checkpoint_shard

        return load_checkpoint_shard(spec.checkpoint, rank=ctx.rank, world=ctx.world_size, device=ctx.device,
                                     reduce=distributed.all_reduce_sum, layer0_only=layer0_only)
    layers = 1 if layer0_only and spec.layers is None else spec.layers
    config = make_config(spec.preset, layers=layers, experts=spec.experts)
    return build_shard(config, rank=ctx.rank, world=ctx.world_size, seed=spec.seed, init=spec.init,
                       device=ctx.device, reduce=distributed.all_reduce_sum)


def seeded_prompt(vocab_size: int, tokens: int, seed: int, device: torch.device) -> torch.Tensor:
    """[1, tokens] int64 ids drawn uniformly from [3, vocab) (ids 0-2 are special) by `seed`."""
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise ValueError(f"tokens must be a positive int, got {tokens!r}")
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab_size, (1, tokens), generator=generator).to(device)


def text_prompt(ids: list[int], tokens: int | None, device: torch.device) -> torch.Tensor:
    """[1, N] ids of a tokenised text, repeated cyclically up to `tokens` when that is longer."""
    if not ids:
        raise ValueError("text must not be empty")
    if tokens is not None and tokens > len(ids):
        ids = (ids * (tokens // len(ids) + 1))[:tokens]
    return torch.tensor([ids], dtype=torch.long, device=device)
