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
Both, and the torchrun shard loader, first hold every tensor's name, shape and dtype (safetensors
metadata; no data read) against the model its config.json builds (`check_tensors`): a missing
tensor, one of another shape than the config implies, or an FP8 weight without a 128x128-block
`weight_scale_inv` of the right shape is a CheckpointError naming the tensor and both shapes,
before anything is built (transformers would only warn and initialise the tensor randomly, or
dequantise with the wrong scales). The whole checkpoint is checked, also for layer-0 loading: a
checkpoint whose later layers disagree with its config is not the model it claims to be. Tensors
the model does not use are a one-line warning (the run goes on; nothing of the model depends on
them), except the layers config.json declares as `num_nextn_predict_layers` (GLM's MTP layer,
which transformers ignores too).
Errors: a missing directory, config or weight file raises FileNotFoundError; a config that is
not `glm_moe_dsa`, a corrupt or incomplete safetensors file, or tensors that disagree with the
config raise CheckpointError.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from pathlib import Path

import torch
import transformers
from safetensors import SafetensorError, safe_open
from transformers import AutoConfig, GlmMoeDsaConfig, GlmMoeDsaForCausalLM
from transformers.utils import logging as hf_logging

from glmcheck.model.build import FP32_PATTERNS, build_dummy_model
from glmcheck.model.fp8_blocks import dequantize_blocks
from glmcheck.model.sharding import full_shapes

log = logging.getLogger("glmcheck")
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
LAYER0_PREFIXES = ("model.embed_tokens.", "model.layers.0.")
# The model holds each MoE layer's routed experts fused; the files hold them per expert.
FUSED_EXPERTS = re.compile(r"^(?P<prefix>.*\.mlp\.experts)\.(?P<kind>gate_up_proj|down_proj)$")
FP8_DTYPE = "F8_E4M3"
FLOAT_DTYPES = {"BF16", "F16", "F32", "F64", FP8_DTYPE}
SCALE_SUFFIX = "_scale_inv"
SCALE_DTYPES = ("F32", "BF16")  # what a block scale may be stored as


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
            return dict.fromkeys(handle.keys(), SINGLE_FILE)
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


def file_shapes(config: GlmMoeDsaConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor the model built from `config` reads, by its name in the files, and the shape the
    config implies (built on the meta device; routed experts per expert, as the files store them)."""
    expected: dict[str, tuple[int, ...]] = {}
    for name, shape in full_shapes(config).items():
        fused = FUSED_EXPERTS.match(name)
        if not fused:
            expected[name] = tuple(shape)
            continue
        experts, rows, cols = shape
        parts = ((("gate_proj", "up_proj"), (rows // 2, cols)) if fused["kind"] == "gate_up_proj"
                 else (("down_proj",), (rows, cols)))
        for expert in range(experts):
            for part in parts[0]:
                expected[f"{fused['prefix']}.{expert}.{part}.weight"] = parts[1]
    return expected


def scale_shape(shape: tuple[int, ...], block: tuple[int, int]) -> tuple[int, int]:
    """The `weight_scale_inv` shape of a block-FP8 weight: ceil(rows / b0) x ceil(cols / b1)."""
    return -(-shape[0] // block[0]), -(-shape[1] // block[1])


def _dims(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _unused_layer(name: str, config: GlmMoeDsaConfig) -> bool:
    """A tensor of the layers config.json declares as next-token-prediction (MTP) layers, which the
    model does not build (transformers ignores them as well)."""
    match = re.match(r"model\.layers\.(\d+)\.", name)
    extra = getattr(config, "num_nextn_predict_layers", 0) or 0
    return bool(match) and config.num_hidden_layers <= int(match[1]) < config.num_hidden_layers + extra


def tensor_metadata(root: Path, mapping: dict[str, str]) -> dict[str, tuple[tuple[int, ...], str]]:
    """(shape, safetensors dtype) of every tensor the index maps to a file that holds it (headers only, no data)."""
    found: dict[str, tuple[tuple[int, ...], str]] = {}
    by_file: dict[str, list[str]] = {}
    for name, file in mapping.items():
        by_file.setdefault(file, []).append(name)
    for file, names in sorted(by_file.items()):
        with _open(root / file) as handle:
            present = set(handle.keys())
            for name in names:
                if name in present:
                    piece = handle.get_slice(name)
                    found[name] = (tuple(piece.get_shape()), piece.get_dtype())
    return found


def check_tensors(path: str | os.PathLike, config: GlmMoeDsaConfig | None = None, *, warn: bool = True) -> list[str]:
    """Hold the checkpoint's tensors (names, shapes, dtypes: safetensors metadata, no data read)
    against the model `config` (default: its config.json, whole) builds.

    CheckpointError naming the tensor and both shapes for a tensor the model needs that is missing
    or has another shape than the config implies, an FP8 weight whose `weight_scale_inv` is missing
    or not ceil(rows / 128) x ceil(cols / 128), an FP8 tensor without an fp8 quantization_config,
    or a tensor that is not floating point, FP8 codes that are not e4m3 (a weight of another dtype beside a
    `weight_scale_inv`) or scales stored as anything but F32 / BF16 (the first problem is named, the others
    counted). The scales' values are checked where they are read (`check_scale_values`).
    Returns the names the model does not use (after a one-line warning when there are any and `warn`).
    """
    root = Path(path)
    config = config if config is not None else read_config(root)
    mapping = weight_map(root)
    block, fp8 = fp8_block(config), is_fp8(config)
    found = tensor_metadata(root, mapping)
    index = INDEX_FILE if (root / INDEX_FILE).is_file() else SINGLE_FILE
    expected = file_shapes(config)
    problems: list[str] = []
    for name, shape in expected.items():
        if name not in mapping:
            problems.append(f"lacks tensor {name} (config.json implies {_dims(shape)}; {index} does not list it)")
            continue
        if name not in found:
            problems.append(f"lacks tensor {name} (config.json implies {_dims(shape)}; {index} maps it to "
                            f"{mapping[name]}, which does not hold it)")
            continue
        have, dtype = found[name]
        if have != shape:
            problems.append(f"tensor {name} is {_dims(have)} in {mapping[name]}, but config.json implies "
                            f"{_dims(shape)}")
        elif dtype != FP8_DTYPE and fp8 and name + SCALE_SUFFIX in found:
            problems.append(f"tensor {name} in {mapping[name]} is {dtype} beside its {name}{SCALE_SUFFIX}; "
                            f"block-FP8 codes must be {FP8_DTYPE} (e4m3fn)")
        elif dtype not in FLOAT_DTYPES:
            problems.append(f"tensor {name} in {mapping[name]} is {dtype}; expected a floating-point tensor")
        elif dtype == FP8_DTYPE:
            problems += _fp8_problems(name, shape, fp8, block, mapping, found)
    if problems:
        more = f" ({len(problems) - 1} more tensors disagree)" if len(problems) > 1 else ""
        raise CheckpointError(f"checkpoint {str(root)!r}: {problems[0]}{more}")
    scales = {n + SCALE_SUFFIX for n in expected if found.get(n, ((), ""))[1] == FP8_DTYPE}
    unused = sorted(n for n in mapping if n not in expected and n not in scales and not _unused_layer(n, config))
    if unused and warn:
        log.warning("glmcheck: checkpoint %s has %d tensor%s the model of its config.json does not use (ignored): %s",
                    root, len(unused), "" if len(unused) == 1 else "s",
                    ", ".join(unused[:3]) + (", ..." if len(unused) > 3 else ""))
    return unused


def _fp8_problems(name: str, shape: tuple[int, ...], fp8: bool, block: tuple[int, int],
                  mapping: dict[str, str], found: dict) -> list[str]:
    """What is wrong with the FP8 weight `name` of the config's `shape` (nothing: [])."""
    if not fp8:
        return [(f"tensor {name} in {mapping[name]} is FP8 ({FP8_DTYPE}), but config.json has no fp8 "
                 f"quantization_config (its weight_scale_inv blocks would be ignored)")]
    if len(shape) != 2:
        return [(f"tensor {name} in {mapping[name]} is FP8 ({FP8_DTYPE}) with {len(shape)} dims; block-FP8 "
                 f"weights are 2-D")]
    scale, need = name + SCALE_SUFFIX, scale_shape(shape, block)
    blocks = f"a {_dims(shape)} FP8 weight in {block[0]}x{block[1]} blocks needs {_dims(need)}"
    if scale not in found:
        return [f"lacks tensor {scale} ({blocks}; {name} is {FP8_DTYPE})"]
    if found[scale][0] != need:
        return [f"tensor {scale} is {_dims(found[scale][0])} in {mapping[scale]}, but {blocks}"]
    if found[scale][1] not in SCALE_DTYPES:
        return [(f"tensor {scale} in {mapping[scale]} is {found[scale][1]}; block scales must be "
                 f"{' or '.join(SCALE_DTYPES)}")]
    return []


def check_scale_values(root: Path, file: str, name: str, values: torch.Tensor) -> None:
    """CheckpointError naming the FP8 block-scale tensor `name` when it holds NaN or Inf (each would make a whole
    128 x 128 block of its weight NaN); every loader checks the scales it reads."""
    if not bool(torch.isfinite(values).all()):
        bad = int((~torch.isfinite(values)).sum())
        raise CheckpointError(f"checkpoint {str(root)!r}: tensor {name} in {file} holds {bad} NaN/Inf block "
                              f"scale{'' if bad == 1 else 's'} of {values.numel()}")


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
        from glmcheck.model.checkpoint_shard import load_checkpoint_shard

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
        with _open(root / mapping[name]) as handle:
            param.data = _read_one(handle, mapping, root, name, block).to(param.device, torch.float32)


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
        with _open(root / file) as handle:
            for name in names:
                tensor = _read_one(handle, mapping, root, name, block)
                check_shape(root, mapping, name, tensor, state[name].shape)
                state[name].copy_(tensor.to(state[name].dtype))
    return set(wanted)


def check_shape(root: Path, mapping: dict[str, str], name: str, tensor: torch.Tensor, expected) -> None:
    """CheckpointError unless the tensor read for `name` has the shape its model parameter has (what
    `check_tensors` already held from the metadata; this guards the copy itself)."""
    if tuple(tensor.shape) != tuple(expected):
        raise CheckpointError(f"checkpoint {str(root)!r}: tensor {name} is {_dims(tensor.shape)} in "
                              f"{mapping.get(name, '?')}, but config.json implies {_dims(expected)}")


def _read_one(handle, mapping: dict[str, str], root: Path, name: str, block: tuple[int, int]) -> torch.Tensor:
    try:
        tensor = handle.get_tensor(name)
    except (SafetensorError, OSError) as err:
        raise CheckpointError(f"{root / mapping[name]}: tensor {name} is unreadable: {err}") from None
    if tensor.dtype == torch.float8_e4m3fn:
        scale_name = name + SCALE_SUFFIX
        if scale_name not in mapping:
            raise CheckpointError(f"checkpoint {str(root)!r}: FP8 tensor {name} has no {scale_name}")
        with _open(root / mapping[scale_name]) as scale_file:
            scale = scale_file.get_tensor(scale_name)
            check_scale_values(root, mapping[scale_name], scale_name, scale)
            try:
                tensor = dequantize_blocks(tensor, scale, block)
            except ValueError as err:
                raise CheckpointError(f"checkpoint {str(root)!r}: {scale_name} of {name}: {err}") from None
    return tensor
