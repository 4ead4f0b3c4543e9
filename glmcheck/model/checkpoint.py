"""Real GLM-MoE-DSA weights from a local Hugging Face directory (never a hub download).

Two ways in:
- `load_checkpoint_model(path, device=...)`: the whole model through transformers'
  `from_pretrained` (local files only). On CUDA the model is placed over the visible GPUs by
  accelerate (`device_map="auto"`); if part of it lands on the CPU or disk a warning says so.
  A block-FP8 checkpoint (`quantization_config` fp8 e4m3, 128x128 blocks) is read tensor by
  tensor and dequantised to bf16 by glmcheck (`checkpoint_shard`, one rank of one; transformers'
  own `dequantize=True` mistakes the blocks of a dimension that is not a multiple of 128), so the
  harness sees bf16 weights (the attention kernel under test takes bf16 either way);
  `fp8_checkpoint` keeps them FP8 instead (`--weights fp8`).
- `load_layer0_model(path, device=...)`: a one-layer model holding only the embedding and
  layer 0, read tensor by tensor from the safetensors index, so a layer-0 check on a 744B
  checkpoint fits one GPU. FP8 tensors are dequantised with their `weight_scale_inv` blocks.
  The final norm and lm_head are not read (their seeded dummy values are kept and listed in
  `model.glmcheck_unloaded`): logits of such a model mean nothing.
Both, and the torchrun shard loader, first hold every tensor's name, shape and dtype against the
model its config.json builds (`checkpoint_files.check_tensors`, metadata only), so a checkpoint that
disagrees with its config is a CheckpointError naming the tensor before anything is built; the
files' other errors are `checkpoint_files`' own.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from pathlib import Path

import torch
import transformers
from safetensors import SafetensorError
from transformers import GlmMoeDsaForCausalLM
from transformers.utils import logging as hf_logging

from glmcheck.model.build import FP32_PATTERNS, build_dummy_model
from glmcheck.model.checkpoint_files import (
    CheckpointError,
    check_shape,
    check_tensors,
    fp8_block,
    is_fp8,
    open_safetensors,
    read_config,
    read_tensor,
    trim_to_layer0,
    weight_map,
)
from glmcheck.model.checkpoint_shard import load_checkpoint_shard

log = logging.getLogger("glmcheck")
LAYER0_PREFIXES = ("model.embed_tokens.", "model.layers.0.")


def load_checkpoint_model(path: str | os.PathLike, *, device: torch.device | str = "cpu",
                          attn_implementation: str = "sdpa") -> GlmMoeDsaForCausalLM:
    """The whole checkpoint in bf16 (FP8 dequantised), on `device` (CUDA: a bf16 checkpoint over all GPUs).

    A block-FP8 checkpoint is read by glmcheck's own loader (`checkpoint_shard`, one rank of one, on `device`),
    its blocks dequantised as its quantization_config says (`fp8_blocks.dequantize_blocks`): transformers'
    `FineGrainedFP8Config(dequantize=True)` (5.17, 5.25) takes the block size from the scale grid's shape, which
    is wrong wherever a dimension is not a multiple of 128 (a 192-row weight read in 96-row blocks) and refused
    where the block count does not divide it (GLM-5.x's 576-row kv_a_proj_with_mqa)."""
    config = read_config(path)
    device = torch.device(device)
    if is_fp8(config):
        return load_checkpoint_shard(path, rank=0, world=1, device=device, attn_implementation=attn_implementation)
    check_tensors(path, config)  # names and shapes against the config, before transformers sees them
    kwargs = dict(dtype=torch.bfloat16, local_files_only=True, attn_implementation=attn_implementation)
    if device.type == "cuda":
        kwargs["device_map"] = "auto"
    try:
        with _transformers_errors_only():  # its multi-line load report: check_tensors has said it in one line
            model, info = GlmMoeDsaForCausalLM.from_pretrained(path, output_loading_info=True, **kwargs)
    except torch.OutOfMemoryError:
        raise
    except (SafetensorError, OSError, RuntimeError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(f"checkpoint {str(path)!r} could not be loaded: {first}") from None
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
        with open_safetensors(root / mapping[name]) as handle:
            param.data = read_tensor(handle, mapping, root, name, block).to(param.device, torch.float32)


@contextlib.contextmanager
def _transformers_errors_only():
    """transformers' errors only: no load report, no "Loading weights" progress bar (a check's
    stderr carries its own progress and, on bad input, exactly one line)."""
    previous, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(previous)
        if bars:
            hf_logging.enable_progress_bar()


def check_loading_info(path: str | os.PathLike, info: dict) -> None:
    """CheckpointError when transformers left parameters unloaded (it would init them randomly) or
    skipped tensors of the wrong shape: a second line of defence behind `check_tensors`, which has
    already named (and warned about) the tensors the model does not use."""
    problems = {kind: sorted(map(str, info.get(kind) or [])) for kind in ("missing_keys", "mismatched_keys")}
    problems = {kind: names for kind, names in problems.items() if names}
    if problems:
        detail = "; ".join(f"{kind.replace('_', ' ')} ({len(names)}): {', '.join(names[:5])}"
                           + (" ..." if len(names) > 5 else "") for kind, names in problems.items())
        raise CheckpointError(f"checkpoint {str(path)!r} does not match this transformers "
                              f"({transformers.__version__}) GlmMoeDsaForCausalLM: {detail}")



def load_layer0_model(path: str | os.PathLike, *, device: torch.device | str = "cpu",
                      attn_implementation: str = "sdpa") -> GlmMoeDsaForCausalLM:
    """A one-layer model with the checkpoint's embedding and layer 0 (see module docstring)."""
    config = read_config(path)
    trim_to_layer0(config, path)
    check_tensors(path)  # the whole checkpoint against its whole config (metadata only)
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
        with open_safetensors(root / file) as handle:
            for name in names:
                tensor = read_tensor(handle, mapping, root, name, block)
                check_shape(root, mapping, name, tensor, state[name].shape)
                state[name].copy_(tensor.to(state[name].dtype))
    return set(wanted)

