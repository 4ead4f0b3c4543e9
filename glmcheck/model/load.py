"""Which model a check builds and how: a preset with seeded dummy weights or a local checkpoint,
whole or layer 0 only, one process or this rank's TP shard under torchrun (or one rank's shard alone: a rehearsal),
its block-FP8 weights dequantised at load (bf16) or resident (fp8); and the device it runs on."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from glmcheck.model.build import build_dummy_model
from glmcheck.model.names import model_names
from glmcheck.model.presets import PRESETS, make_config
from glmcheck.model.trained import is_trained, trained_checkpoint
from glmcheck.model.weights import INIT_SCALES


@dataclass(frozen=True)
class ModelSpec:
    """Which model to build: a preset with dummy weights, a trained model by name
    (`glmcheck.model.trained`: its checkpoint in glmcheck/data/resources/trained_models/), or a local checkpoint."""

    preset: str = "tiny"
    checkpoint: str | None = None
    layers: int | None = None
    experts: int | None = None
    seed: int = 0
    init: str = "sharp"
    trained: str | None = None  # set from `preset` when it names a trained model
    weights: str = "bf16"  # "fp8": block-FP8 weights resident (a preset's dummy weights quantised), `fp8_resident`

    def __post_init__(self):
        if is_trained(self.preset) and self.checkpoint is None:
            object.__setattr__(self, "trained", self.preset)
            object.__setattr__(self, "checkpoint", str(trained_checkpoint(self.preset)))

    def describe(self) -> dict:
        return {"preset": None if self.checkpoint else self.preset, "trained": self.trained,
                "checkpoint": self.checkpoint, "layers": self.layers, "experts": self.experts, "seed": self.seed,
                "init": None if self.checkpoint else self.init, "weights": self.weights}


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


def config_of(spec: ModelSpec, *, layer0_only: bool = False, check_tensors: bool = False):
    """The config of the model `spec` describes, as `load_model` would build it (reads files only).
    ValueError for --layers / --experts with a checkpoint (they apply to presets) or below 1; with `check_tensors`,
    also for a checkpoint tensor that its config.json does not describe (one line naming the tensor and both
    shapes)."""
    for option, value in (("--layers", spec.layers), ("--experts", spec.experts)):
        if value is not None and (isinstance(value, bool) or value < 1):
            raise ValueError(f"{option} must be an int >= 1, got {value!r}")
    if spec.checkpoint:
        from glmcheck.model import checkpoint_files

        config = checkpoint_files.read_config(spec.checkpoint)
        for option, value, own in (("--layers", spec.layers, config.num_hidden_layers),
                                   ("--experts", spec.experts, config.n_routed_experts)):
            if value is not None and value != own:
                raise ValueError(f"{option} {value} does not apply to --checkpoint {spec.checkpoint} "
                                 f"(it has {own}; the checkpoint's own are used)")
        if check_tensors:
            checkpoint_files.check_tensors(spec.checkpoint, warn=False)
        if layer0_only:
            config.num_hidden_layers = 1
        return config
    if spec.preset not in PRESETS:
        raise ValueError(f"unknown model {spec.preset!r}; expected one of {', '.join(model_names())}")
    layers = 1 if layer0_only and spec.layers is None else spec.layers
    return make_config(spec.preset, layers=layers, experts=spec.experts)


def resolve_model(spec: ModelSpec, device: str | torch.device | None, *, layer0_only: bool = False
                  ) -> tuple[object, torch.device]:
    """(config, device) of the model `spec` describes, checked before anything is built: the device
    (`resolve_device`; a torch.device is taken as is), its config and a checkpoint's tensors (`config_of`)."""
    device = device if isinstance(device, torch.device) else resolve_device(device)
    return config_of(spec, layer0_only=layer0_only, check_tensors=True), device


def heads_of(spec: ModelSpec) -> int:
    """Attention heads of the model `spec` describes (reads only the config)."""
    return config_of(spec).num_attention_heads


def latent_dims_of(spec: ModelSpec) -> tuple[int, int]:
    """(kv_lora_rank, qk_rope_head_dim) of the model `spec` describes (reads only the config)."""
    config = config_of(spec)
    return config.kv_lora_rank, config.qk_rope_head_dim


def load_model(spec: ModelSpec, device: torch.device, *, layer0_only: bool = False,
               rehearse: tuple[int, int] | None = None) -> torch.nn.Module:
    """Build the model `spec` describes on `device` (layer0_only: one layer / partial loading).

    Under torchrun (glmcheck.model.distributed active) each rank builds only its TP shard; `rehearse` (rank,
    world) builds that rank's shard alone, its all-reduces left out (the identity).
    """
    from glmcheck.model import distributed

    if spec.init not in INIT_SCALES:
        raise ValueError(f"init must be one of {', '.join(INIT_SCALES)}, got {spec.init!r}")
    if spec.weights not in ("bf16", "fp8"):
        raise ValueError(f"weights must be bf16 or fp8, got {spec.weights!r}")
    ctx = distributed.current()
    if ctx is not None:
        return _load_shard(spec, ctx.rank, ctx.world_size, ctx.device, distributed.all_reduce_sum, layer0_only)
    if rehearse is not None:
        return _load_shard(spec, *rehearse, device, None, layer0_only)
    if spec.weights == "fp8":
        return _load_shard(spec, 0, 1, device, None, layer0_only)
    if spec.checkpoint:
        from glmcheck.model.checkpoint import load_checkpoint_model, load_layer0_model

        return (load_layer0_model if layer0_only else load_checkpoint_model)(spec.checkpoint, device=device)
    layers = 1 if layer0_only and spec.layers is None else spec.layers
    config = make_config(spec.preset, layers=layers, experts=spec.experts)
    return build_dummy_model(config, seed=spec.seed, init=spec.init, device=device)


def _load_shard(spec: ModelSpec, rank: int, world: int, device: torch.device, reduce, layer0_only: bool
                ) -> torch.nn.Module:
    """Rank `rank` of `world`'s shard of the model (world 1: the whole of it), `reduce` hooked after each o_proj and
    MLP (None: none), in the format `spec.weights` names."""
    from glmcheck.model.sharding import build_shard

    fp8 = spec.weights == "fp8"
    if spec.checkpoint:
        if fp8:
            from glmcheck.model.fp8_checkpoint import load_resident_checkpoint as load
        else:
            from glmcheck.model.checkpoint_shard import load_checkpoint_shard as load
        return load(spec.checkpoint, rank=rank, world=world, device=device, reduce=reduce, layer0_only=layer0_only)
    layers = 1 if layer0_only and spec.layers is None else spec.layers
    config = make_config(spec.preset, layers=layers, experts=spec.experts)
    if fp8:
        from glmcheck.model.fp8_build import build_resident, dummy_sources

        fp8_source, dense = dummy_sources(config, rank=rank, world=world, device=device, seed=spec.seed,
                                          init=spec.init)
        return build_resident(config, rank=rank, world=world, device=device, fp8=fp8_source, dense=dense,
                              reduce=reduce)
    return build_shard(config, rank=rank, world=world, seed=spec.seed, init=spec.init, device=device, reduce=reduce)
