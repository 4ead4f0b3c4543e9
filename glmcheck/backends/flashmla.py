"""FlashMLA's sparse prefill (SM90) as a kernel-level backend, heads zero-padded to 64.

FlashMLA is found in this order: an explicit library path (argument, or the environment
variable GLMCHECK_FLASHMLA_LIB) loaded with torch.ops.load_library; `vllm._flashmla_C`;
`sgl_kernel.flash_mla`; `flash_mla`. `find_flashmla()` says which one it loaded, or why none is
present. Only the library-path / vllm form (torch.ops._flashmla_C.sparse_prefill_fwd) has been
run by this project (the vllm 0.24.0 build, on an H200).
"""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch

ENV_LIBRARY = "GLMCHECK_FLASHMLA_LIB"
HEAD_MULTIPLE = 64  # SM90 sparse prefill runs 64-head tiles
TOPK_MULTIPLE = 128  # and asserts topk % (2 * B_TOPK) == 0 with B_TOPK = 64: pad with -1 slots
LATENT_DIMS = (512, 64)  # the only (d_v, rope) it takes: d_qk 576 (GLM-5.x, DeepSeek-V3.2)


def flashmla_supports(latent_dims: tuple[int, int] | None) -> bool:
    """Whether FlashMLA's sparse prefill takes a model with this (kv_lora_rank, rope dim); None: unknown."""
    return latent_dims is None or tuple(latent_dims) == LATENT_DIMS


@dataclass(frozen=True)
class FlashMLA:
    """A loaded FlashMLA sparse prefill: `source` says where it came from."""

    source: str
    run: Callable  # (q [T,Hpad,576], kv [S,1,576], idx [T,1,K], sm_scale, d_v, topk_length) -> out


class FlashMLAUnavailable(RuntimeError):
    """No FlashMLA sparse prefill could be loaded; the message lists what was tried."""


def _torch_ops_runner(source: str) -> FlashMLA:
    op = torch.ops._flashmla_C.sparse_prefill_fwd

    def run(q, kv, indices, sm_scale, d_v, topk_length):
        return op(q, kv, indices, sm_scale, d_v, None, topk_length, None)[0]

    return FlashMLA(source, run)


def _python_runner(source: str, fn: Callable) -> FlashMLA:
    takes_length = "topk_length" in inspect.signature(fn).parameters

    def run(q, kv, indices, sm_scale, d_v, topk_length):
        kwargs = {"topk_length": topk_length} if takes_length and topk_length is not None else {}
        result = fn(q, kv, indices, sm_scale, d_v, **kwargs)
        return result[0] if isinstance(result, tuple) else result

    return FlashMLA(source, run)


_cache: dict[str | None, FlashMLA] = {}


def find_flashmla(library: str | None = None) -> FlashMLA:
    """Load FlashMLA's sparse prefill (see module docstring) or raise FlashMLAUnavailable."""
    library = library or os.environ.get(ENV_LIBRARY) or None
    if library in _cache:
        return _cache[library]
    tried: list[str] = []
    found = _load(library, tried)
    if found is None:
        raise FlashMLAUnavailable("FlashMLA sparse prefill not found (tried: " + "; ".join(tried) + ")")
    _cache[library] = found
    return found


def _load(library: str | None, tried: list[str]) -> FlashMLA | None:
    if library:
        if not os.path.isfile(library):
            raise FlashMLAUnavailable(f"FlashMLA library {library!r} does not exist")
        torch.ops.load_library(library)
        return _torch_ops_runner(f"library {library}")
    tried.append(f"${ENV_LIBRARY} unset")
    for module, attr in (("vllm._flashmla_C", None), ("sgl_kernel.flash_mla", "flash_mla_sparse_fwd"),
                         ("flash_mla", "flash_mla_sparse_fwd")):
        try:
            mod = importlib.import_module(module)
        except Exception as err:  # noqa: BLE001  (any import failure means "not here")
            tried.append(f"{module}: {type(err).__name__}")
            continue
        if attr is None:
            return _torch_ops_runner(module)
        if hasattr(mod, attr):
            return _python_runner(module, getattr(mod, attr))
        tried.append(f"{module}: no {attr}")
    return None


def flashmla_sparse_prefill(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, sm_scale: float,
                            d_v: int = 512, *, topk_length: torch.Tensor | None = None,
                            library: str | None = None) -> torch.Tensor:
    """FlashMLA sparse prefill with H heads zero-padded to a multiple of 64 and topk padded with -1 to
    a multiple of 128; returns [T, H, d_v] bf16."""
    flash = find_flashmla(library)
    num_tokens, num_heads, d_qk = q.shape
    padded_heads = -(-num_heads // HEAD_MULTIPLE) * HEAD_MULTIPLE
    q_pad = q
    if padded_heads != num_heads:
        q_pad = torch.zeros((num_tokens, padded_heads, d_qk), dtype=q.dtype, device=q.device)
        q_pad[:, :num_heads] = q
    kv3 = kv if kv.dim() == 3 else kv[:, None, :]
    idx3 = indices if indices.dim() == 3 else indices[:, None, :]
    topk = idx3.shape[-1]
    padded_topk = -(-topk // TOPK_MULTIPLE) * TOPK_MULTIPLE
    if padded_topk != topk:  # short prompts: the indexer selects min(index_topk, T) slots
        idx3 = torch.nn.functional.pad(idx3, (0, padded_topk - topk), value=-1)
    out = flash.run(q_pad, kv3, idx3, sm_scale, d_v, topk_length)
    return out[:, :num_heads]
