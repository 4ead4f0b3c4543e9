"""A local GLM-MoE-DSA checkpoint's files, read and held against its config (no model is built here).

- `read_config`: config.json, checked to be `glm_moe_dsa`; `weight_map`: tensor name -> safetensors file (the index
  or the single weights file); `tensor_metadata`: every tensor's shape and dtype (headers only, no data read).
- `check_tensors`: every tensor's name, shape and dtype against the model config.json builds: a missing tensor, one
  of another shape than the config implies, or an FP8 weight without a 128x128-block `weight_scale_inv` of the
  right shape is a CheckpointError naming the tensor and both shapes, before anything is built (transformers would
  only warn and initialise the tensor randomly, or dequantise with the wrong scales). The whole checkpoint is
  checked, also for layer-0 loading: a checkpoint whose later layers disagree with its config is not the model it
  claims to be. Tensors the model does not use are a one-line warning (the run goes on; nothing of the model
  depends on them), except the layers config.json declares as `num_nextn_predict_layers` (GLM's MTP layer, which
  transformers ignores too).
- `open_safetensors` and `read_tensor`: one file, one tensor (FP8 dequantised with its `weight_scale_inv` blocks,
  whose values `check_scale_values` holds finite), for the loaders (`checkpoint`, `checkpoint_shard`,
  `fp8_checkpoint`).
Errors: a missing directory, config or weight file raises FileNotFoundError; a config that is not `glm_moe_dsa`, a
corrupt or incomplete safetensors file, or tensors that disagree with the config raise CheckpointError.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from transformers import AutoConfig, GlmMoeDsaConfig

from glmcheck.model.fp8_blocks import dequantize_blocks
from glmcheck.model.sharding import full_shapes

log = logging.getLogger("glmcheck")
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
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
        with open_safetensors(root / SINGLE_FILE) as handle:
            return dict.fromkeys(handle.keys(), SINGLE_FILE)
    raise FileNotFoundError(f"checkpoint {str(root)!r} has neither {INDEX_FILE} nor {SINGLE_FILE}")


def open_safetensors(file: Path):
    """`safe_open` of one weights file on the CPU (a context manager; headers read, no tensor data until asked);
    CheckpointError naming the file when it is not a readable safetensors file."""
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


def format_shape(shape) -> str:
    """A shape as the errors name it: "[576, 2048]"."""
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
        with open_safetensors(root / file) as handle:
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
            problems.append(f"lacks tensor {name} (config.json implies {format_shape(shape)}; {index} does not "
                            f"list it)")
            continue
        if name not in found:
            problems.append(f"lacks tensor {name} (config.json implies {format_shape(shape)}; {index} maps it to "
                            f"{mapping[name]}, which does not hold it)")
            continue
        have, dtype = found[name]
        if have != shape:
            problems.append(f"tensor {name} is {format_shape(have)} in {mapping[name]}, but config.json implies "
                            f"{format_shape(shape)}")
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
    blocks = f"a {format_shape(shape)} FP8 weight in {block[0]}x{block[1]} blocks needs {format_shape(need)}"
    if scale not in found:
        return [f"lacks tensor {scale} ({blocks}; {name} is {FP8_DTYPE})"]
    if found[scale][0] != need:
        return [f"tensor {scale} is {format_shape(found[scale][0])} in {mapping[scale]}, but {blocks}"]
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



def trim_to_layer0(config: GlmMoeDsaConfig, path: str | os.PathLike) -> None:
    """Cut `config` to its first layer in place (CheckpointError unless layer 0 is dense)."""
    if config.mlp_layer_types[0] != "dense":
        raise CheckpointError(f"checkpoint {str(path)!r}: layer-0 loading needs a dense layer 0")
    config.num_hidden_layers = 1
    config.indexer_types = config.indexer_types[:1]
    config.mlp_layer_types = config.mlp_layer_types[:1]
    config.layer_types = config.layer_types[:1]



def check_shape(root: Path, mapping: dict[str, str], name: str, tensor: torch.Tensor, expected) -> None:
    """CheckpointError unless the tensor read for `name` has the shape its model parameter has (what
    `check_tensors` already held from the metadata; this guards the copy itself)."""
    if tuple(tensor.shape) != tuple(expected):
        raise CheckpointError(f"checkpoint {str(root)!r}: tensor {name} is {format_shape(tensor.shape)} in "
                              f"{mapping.get(name, '?')}, but config.json implies {format_shape(expected)}")


def read_tensor(handle, mapping: dict[str, str], root: Path, name: str, block: tuple[int, int]) -> torch.Tensor:
    """The tensor `name` as stored in the open file `handle` (from `open_safetensors`), whole; an FP8 (e4m3) one is
    dequantised with its `weight_scale_inv` (read from whichever file `mapping` names, checked finite) in `block`
    (rows, columns) blocks, to fp32. CheckpointError naming the tensor when it is unreadable or its
    scales are missing, non-finite or do not fit it."""
    try:
        tensor = handle.get_tensor(name)
    except (SafetensorError, OSError) as err:
        raise CheckpointError(f"{root / mapping[name]}: tensor {name} is unreadable: {err}") from None
    if tensor.dtype == torch.float8_e4m3fn:
        scale_name = name + SCALE_SUFFIX
        if scale_name not in mapping:
            raise CheckpointError(f"checkpoint {str(root)!r}: FP8 tensor {name} has no {scale_name}")
        with open_safetensors(root / mapping[scale_name]) as scale_file:
            scale = scale_file.get_tensor(scale_name)
            check_scale_values(root, mapping[scale_name], scale_name, scale)
            try:
                tensor = dequantize_blocks(tensor, scale, block)
            except ValueError as err:
                raise CheckpointError(f"checkpoint {str(root)!r}: {scale_name} of {name}: {err}") from None
    return tensor
