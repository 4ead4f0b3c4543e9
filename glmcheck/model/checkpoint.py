"""Real GLM-MoE-DSA weights from a local Hugging Face directory (never a hub download).

Two ways in:
- `load_checkpoint_model(path, device=...)`: the whole model through transformers'
  `from_pretrained` (local files only). A block-FP8 checkpoint (`quantization_config` fp8
  e4m3, 128x128 blocks) goes through transformers' own FP8 support with `dequantize=True`, so
  the harness sees bf16 weights (the attention kernel under test takes bf16 either way). On
  CUDA the model is placed over the visible GPUs by accelerate (`device_map="auto"`); if part
  of it lands on the CPU or disk a warning says so.
- `load_layer0_model(path, device=...)`: a one-layer model holding only the embedding and
  layer 0, read tensor by tensor from the safetensors index, so a layer-0 check on a 744B
  checkpoint fits one GPU. FP8 tensors are dequantised with their `weight_scale_inv` blocks.
  The final norm and lm_head are not read (their seeded dummy values are kept and listed in
  `model.glmcheck_unloaded`): logits of such a model mean nothing.
Errors: a missing directory, config or weight file raises FileNotFoundError; a config that is
not `glm_moe_dsa`, a corrupt or incomplete safetensors file raises CheckpointError.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

import torch
import transformers
from safetensors import SafetensorError, safe_open
from transformers import AutoConfig, FineGrainedFP8Config, GlmMoeDsaConfig, GlmMoeDsaForCausalLM

from glmcheck.model.build import FP32_PATTERNS, build_dummy_model
from glmcheck.model.fp8_blocks import dequantize_blocks

log = logging.getLogger("glmcheck")
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
LAYER0_PREFIXES = ("model.embed_tokens.", "model.layers.0.")


class CheckpointError(ValueError):
    """A checkpoint that exists but cannot be used; the message names the file and the reason."""


def read_config(path: str | os.PathLike) -> GlmMoeDsaConfig:
    """The checkpoint's config, checked to be a GLM-MoE-DSA model."""
    root = Path(path)
    if root.exists() and not root.is_dir():
        raise NotADirectoryError(f"checkpoint {str(root)!r} is a file; expected a checkpoint directory")
    if not root.is_dir():
        raise FileNotFoundError(f"checkpoint directory {str(root)!r} does not exist")
    if not (root / "config.json").is_file():
        raise FileNotFoundError(f"checkpoint {str(root)!r} has no config.json")
    try:
        config = AutoConfig.from_pretrained(root, local_files_only=True)
    except (OSError, ValueError, json.JSONDecodeError) as err:
        raise CheckpointError(f"checkpoint {str(root)!r}: config.json is unreadable: {err}") from None
    if config.model_type != "glm_moe_dsa":
        raise CheckpointError(f"checkpoint {str(root)!r} is a {config.model_type!r} model, expected glm_moe_dsa")
    return config


def weight_map(path: str | os.PathLike) -> dict[str, str]:
    """Tensor name -> safetensors file name, from the index (or the single weights file)."""
    root = Path(path)
    if (root / INDEX_FILE).is_file():
        try:
            mapping = json.loads((root / INDEX_FILE).read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError) as err:
            raise CheckpointError(f"{root / INDEX_FILE} is corrupt: {err}") from None
        missing = sorted({f for f in mapping.values() if not (root / f).is_file()})
        if missing:
            raise FileNotFoundError(f"checkpoint {str(root)!r} is missing weight files: {', '.join(missing)}")
        return mapping
    if (root / SINGLE_FILE).is_file():
        with _open(root / SINGLE_FILE) as handle:
            return {name: SINGLE_FILE for name in handle.keys()}
    raise FileNotFoundError(f"checkpoint {str(root)!r} has neither {INDEX_FILE} nor {SINGLE_FILE}")


def _open(file: Path):
    try:
        return safe_open(str(file), framework="pt", device="cpu")
    except (SafetensorError, OSError) as err:
        raise CheckpointError(f"{file} is not a readable safetensors file: {err}") from None


def _quant_config(config: GlmMoeDsaConfig) -> dict:
    quant = getattr(config, "quantization_config", None) or {}
    return quant if isinstance(quant, dict) else quant.to_dict()


def fp8_block(config: GlmMoeDsaConfig) -> tuple[int, int]:
    """The FP8 scale block (rows, columns) of the checkpoint's quantization_config (default 128 x 128)."""
    return tuple(_quant_config(config).get("weight_block_size") or (128, 128))


def is_fp8(config: GlmMoeDsaConfig) -> bool:
    """True for a block-FP8 checkpoint (quantization_config.quant_method == "fp8")."""
    return _quant_config(config).get("quant_method") == "fp8"


def load_checkpoint_model(path: str | os.PathLike, *, device: torch.device | str = "cpu",
                          attn_implementation: str = "sdpa") -> GlmMoeDsaForCausalLM:
    """The whole checkpoint in bf16 (FP8 dequantised), on `device` (CUDA: over all GPUs)."""
    config = read_config(path)
    weight_map(path)  # fail early and clearly on missing files
    device = torch.device(device)
    kwargs = dict(dtype=torch.bfloat16, local_files_only=True, attn_implementation=attn_implementation)
    if is_fp8(config):
        kwargs["quantization_config"] = FineGrainedFP8Config(dequantize=True)
    if device.type == "cuda":
        kwargs["device_map"] = "auto"
    try:
        model, info = GlmMoeDsaForCausalLM.from_pretrained(path, output_loading_info=True, **kwargs)
    except (SafetensorError, OSError) as err:
        raise CheckpointError(f"checkpoint {str(path)!r} could not be loaded: {err}") from None
    check_loading_info(path, info)
    restore_fp32(model, path)
    placed = set(getattr(model, "hf_device_map", {}).values())
    if placed & {"cpu", "disk"}:
        log.warning("glmcheck: the model does not fit the visible GPUs; accelerate offloaded part of it to %s "
                    "(slow)", ", ".join(sorted(str(p) for p in placed & {"cpu", "disk"})))
    if device.type != "cuda":
        model = model.to(device)
    return model.eval()


@torch.no_grad()
def restore_fp32(model: torch.nn.Module, path: str | os.PathLike) -> None:
    """Re-read from the files, in fp32, the tensors glmcheck keeps in fp32 (`build.FP32_PATTERNS`:
    routers, score-correction biases) that `from_pretrained` loaded at lower precision.

    transformers 5.17 casts them to the requested bf16, 5.24 keeps them in fp32; this makes the
    loaded model the same on both, and the same as the torchrun shard loader and the dummy builder.
    """
    root, mapping = Path(path), weight_map(path)
    block = fp8_block(read_config(path))
    for name, param in model.named_parameters():
        if param.dtype == torch.float32 or name not in mapping or not any(re.search(p, name) for p in FP32_PATTERNS):
            continue
        with _open(root / mapping[name]) as handle:
            param.data = _read_one(handle, mapping, root, name, block).to(param.device, torch.float32)


def check_loading_info(path: str | os.PathLike, info: dict) -> None:
    """CheckpointError when transformers left parameters unloaded (it would init them randomly) or
    skipped tensors of the wrong shape; a warning for tensors the model does not use."""
    problems = {kind: sorted(map(str, info.get(kind) or [])) for kind in ("missing_keys", "mismatched_keys")}
    problems = {kind: names for kind, names in problems.items() if names}
    if problems:
        detail = "; ".join(f"{kind.replace('_', ' ')} ({len(names)}): {', '.join(names[:5])}"
                           + (" ..." if len(names) > 5 else "") for kind, names in problems.items())
        raise CheckpointError(f"checkpoint {str(path)!r} does not match this transformers "
                              f"({transformers.__version__}) GlmMoeDsaForCausalLM: {detail}")
    unexpected = sorted(map(str, info.get("unexpected_keys") or []))
    if unexpected:
        log.warning("glmcheck: checkpoint %s has %d tensors the model does not use (first: %s)",
                    path, len(unexpected), ", ".join(unexpected[:3]))


def trim_to_layer0(config: GlmMoeDsaConfig, path: str | os.PathLike) -> None:
    """Cut `config` to its first layer in place (CheckpointError unless layer 0 is dense)."""
    if config.mlp_layer_types[0] != "dense":
        raise CheckpointError(f"checkpoint {str(path)!r}: layer-0 loading needs a dense layer 0")
    config.num_hidden_layers = 1
    config.indexer_types = config.indexer_types[:1]
    config.mlp_layer_types = config.mlp_layer_types[:1]
    config.layer_types = config.layer_types[:1]


def load_layer0_model(path: str | os.PathLike, *, device: torch.device | str = "cpu",
                      attn_implementation: str = "sdpa") -> GlmMoeDsaForCausalLM:
    """A one-layer model with the checkpoint's embedding and layer 0 (see module docstring)."""
    config = read_config(path)
    trim_to_layer0(config, path)
    block = fp8_block(config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    mapping = weight_map(path)
    model = build_dummy_model(config, seed=0, device=device, attn_implementation=attn_implementation)
    loaded = _read_tensors(Path(path), mapping, model, block)
    model.glmcheck_unloaded = sorted(set(model.state_dict()) - loaded)
    return model


@torch.no_grad()
def _read_tensors(root: Path, mapping: dict[str, str], model: torch.nn.Module,
                  block: tuple[int, int]) -> set[str]:
    """Copy every wanted tensor (embedding + layer 0) from its file into `model`."""
    state = model.state_dict()
    wanted = [n for n in state if n.startswith(LAYER0_PREFIXES)]
    missing = [n for n in wanted if n not in mapping]
    if missing:
        raise CheckpointError(f"checkpoint {str(root)!r} lacks tensors: {', '.join(missing[:5])}")
    by_file: dict[str, list[str]] = {}
    for name in wanted:
        by_file.setdefault(mapping[name], []).append(name)
    for file, names in sorted(by_file.items()):
        with _open(root / file) as handle:
            for name in names:
                state[name].copy_(_read_one(handle, mapping, root, name, block).to(state[name].dtype))
    return set(wanted)


def _read_one(handle, mapping: dict[str, str], root: Path, name: str, block: tuple[int, int]) -> torch.Tensor:
    try:
        tensor = handle.get_tensor(name)
    except (SafetensorError, OSError) as err:
        raise CheckpointError(f"{root / mapping[name]}: tensor {name} is unreadable: {err}") from None
    if tensor.dtype == torch.float8_e4m3fn:
        scale_name = name + "_scale_inv"
        if scale_name not in mapping:
            raise CheckpointError(f"FP8 tensor {name} has no {scale_name}")
        with _open(root / mapping[scale_name]) as scale_file:
            tensor = dequantize_blocks(tensor, scale_file.get_tensor(scale_name), block)
    return tensor
