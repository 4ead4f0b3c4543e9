"""SGLang's TileLang sparse-MLA prefill (`--nsa-prefill-backend tilelang`) as a kernel-level peer.

What runs is SGLang's own `tilelang_sparse_fwd` (sglang 0.5.23: `sglang/kernels/ops/attention/dsa/tilelang_kernel.py`),
unchanged: on CUDA with bf16 rows and a rope tail it JIT-compiles its `sparse_attention_fwd_kernel_v2` with TileLang
(one program per token and 64-head slice, a producer and two consumer warpgroups over 64-row blocks of the top-k,
every slot read, -1 slots masked; no topk_length) and returns [1, T, H, d_v]. SGLang hands it the heads unpadded and
the top-k padded with -1 to a multiple of 64 (`_forward_tilelang`); so does `tilelang_sparse_prefill`.

The module is found in this order: a file (argument, or $GLMCHECK_TILELANG_MODULE: the module extracted from SGLang's
wheel by scripts/get_tilelang.sh), loaded by path; then an installed SGLang (`sglang.kernels.ops.attention.dsa`, then
`sglang.srt.layers.attention.nsa` of older releases). Loaded by path, the module's three imports of SGLang's platform
queries (`is_hip`, `is_gfx95_supported`, `is_fp8_fnuz`) are answered for CUDA as SGLang's own functions answer there
(`torch.version.hip is not None`, False, False); nothing else of SGLang is imported. `find_tilelang()` says which
module it loaded, or why none is present.

Where the module's kernel refuses a shape (its asserts, `tilelang_refusal`) the call raises `TileLangRefused` before
running; $GLMCHECK_TILELANG_HEADS (e.g. "16,32,64,128", set by scripts/gpu_tilelang_bench.sh from its probes) limits
the head counts it runs at, so that a head count whose probe crashed never runs in the bench's process.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

ENV_MODULE = "GLMCHECK_TILELANG_MODULE"
ENV_HEADS = "GLMCHECK_TILELANG_HEADS"
FUNCTION = "tilelang_sparse_fwd"
INSTALLED = ("sglang.kernels.ops.attention.dsa.tilelang_kernel", "sglang.srt.layers.attention.nsa.tilelang_kernel")
BLOCK_I = 64  # the module's top-k block: SGLang pads the top-k to a multiple of it with -1
HEAD_SLICE = 64  # above 64 heads its kernel runs 64-head slices


class TileLangUnavailable(RuntimeError):
    """No TileLang sparse prefill could be loaded; the message lists what was tried."""


class TileLangRefused(ValueError):
    """The module's kernel does not take this shape (or $GLMCHECK_TILELANG_HEADS leaves its head count out)."""


@dataclass
class TileLangPeer:
    """A loaded `tilelang_sparse_fwd`: `source` says where from; `first_call_s` the seconds of the first call per head
    count (TileLang's compile, or its load from TileLang's disk cache, included)."""

    source: str
    forward: Callable  # (q [T,H,d_qk], kv [S,1,d_qk], indices [T,1,topk] int32, sm_scale, d_v) -> [1,T,H,d_v]
    first_call_s: dict[int, float] = field(default_factory=dict)


def tilelang_refusal(num_heads: int, d_qk: int, d_v: int, topk: int) -> str | None:
    """Why SGLang's TileLang prefill (0.5.23) refuses this shape, from its kernel's asserts; None when it runs.
    `topk` is the index width before SGLang's padding to a multiple of 64."""
    tail = d_qk - d_v
    if d_v <= 0 or d_v & (d_v - 1):
        return f"d_v {d_v} is not a power of two"
    if tail <= 0 or tail & (tail - 1):
        return f"rope tail d_qk - d_v = {tail} is not a power of two (its bf16 prefill kernel needs one)"
    if num_heads > HEAD_SLICE and num_heads % HEAD_SLICE:
        return f"{num_heads} heads: above {HEAD_SLICE} it takes multiples of {HEAD_SLICE} only"
    blocks = -(-topk // BLOCK_I)
    if blocks % 2:
        return f"top-k {topk} pads to {blocks} blocks of {BLOCK_I}; its kernel takes an even number"
    allowed = os.environ.get(ENV_HEADS)
    if allowed is not None and str(num_heads) not in {part.strip() for part in allowed.split(",")}:
        return f"{num_heads} heads not in ${ENV_HEADS}={allowed} (its probe did not pass)"
    return None


def _platform_stubs() -> dict[str, types.ModuleType]:
    """The SGLang modules tilelang_kernel.py imports three functions from, answering as on an NVIDIA GPU."""
    utils = types.ModuleType("sglang.srt.utils")
    utils.is_hip = lambda: torch.version.hip is not None
    utils.is_gfx95_supported = lambda: False
    fp8 = types.ModuleType("sglang.kernels.ops.quantization.fp8_kernel")
    fp8.is_fp8_fnuz = lambda: False
    stubs = {name: types.ModuleType(name) for name in ("sglang", "sglang.srt", "sglang.kernels", "sglang.kernels.ops",
                                                       "sglang.kernels.ops.quantization")}
    for stub in stubs.values():
        stub.__path__ = []
    return stubs | {utils.__name__: utils, fp8.__name__: fp8}


def load_module_file(path: str) -> types.ModuleType:
    """SGLang's tilelang_kernel.py loaded from `path` with `_platform_stubs` in sys.modules during its import only."""
    spec = importlib.util.spec_from_file_location("glmcheck_sglang_tilelang_kernel", path)
    module = importlib.util.module_from_spec(spec)
    stubs = _platform_stubs()
    saved = {name: sys.modules.get(name) for name in stubs}
    sys.modules.update(stubs)
    try:
        spec.loader.exec_module(module)
    finally:
        for name, previous in saved.items():
            if previous is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = previous
    return module


_cache: dict[str | None, TileLangPeer] = {}


def find_tilelang(module_path: str | None = None) -> TileLangPeer:
    """Load SGLang's TileLang sparse prefill (module docstring's order) or raise TileLangUnavailable."""
    module_path = module_path or os.environ.get(ENV_MODULE) or None
    if module_path in _cache:
        return _cache[module_path]
    if torch.version.hip is not None:
        raise TileLangUnavailable("TileLang's CUDA prefill kernel: this torch is a ROCm build")
    tried: list[str] = []
    if module_path:
        if not os.path.isfile(module_path):
            raise TileLangUnavailable(f"TileLang module {module_path!r} does not exist")
        try:
            module, where = load_module_file(module_path), f"file {module_path}"
        except Exception as err:
            raise TileLangUnavailable(f"TileLang module {module_path}: {type(err).__name__}: {err}") from err
    else:
        tried.append(f"${ENV_MODULE} unset")
        module = where = None
        for name in INSTALLED:
            try:
                module, where = importlib.import_module(name), name
                break
            except Exception as err:  # noqa: BLE001  (any import failure means "not here")
                tried.append(f"{name}: {type(err).__name__}")
    if module is None or not hasattr(module, FUNCTION):
        tried += [f"{where}: no {FUNCTION}"] if module is not None else []
        raise TileLangUnavailable("TileLang sparse prefill not found (tried: " + "; ".join(tried) + ")")
    version = getattr(sys.modules.get("tilelang"), "__version__", None)  # the module imported it, if it is SGLang's
    peer = TileLangPeer(f"SGLang's {FUNCTION} from {where} (tilelang {version or 'not imported'})",
                        getattr(module, FUNCTION))
    _cache[module_path] = peer
    return peer


def tilelang_available(module_path: str | None = None) -> tuple[bool, str]:
    """(True, source) when SGLang's TileLang prefill loads, else (False, why)."""
    try:
        return True, find_tilelang(module_path).source
    except TileLangUnavailable as err:
        return False, str(err)


def tilelang_sparse_prefill(q: torch.Tensor, kv: torch.Tensor, indices: torch.Tensor, sm_scale: float,
                            d_v: int = 512, *, topk_length: torch.Tensor | None = None,
                            module_path: str | None = None) -> torch.Tensor:
    """SGLang's TileLang prefill as SGLang calls it: q [T, H, d_qk] bf16 (heads unpadded), kv [S, d_qk] or
    [S, 1, d_qk] bf16, indices [T, topk] (or [T, 1, topk]) padded with -1 to a multiple of 64; returns [T, H, d_v]
    bf16. `topk_length` (slots past it ignored) is applied by masking those slots to -1 first: the module takes none.
    TileLangRefused for a shape its kernel does not take."""
    peer = find_tilelang(module_path)
    num_heads, d_qk = q.shape[1], q.shape[2]
    if q.dtype != torch.bfloat16 or kv.dtype != torch.bfloat16:
        raise TileLangRefused(f"bf16 q and kv only (its FP8 path is a decode kernel), got {q.dtype} / {kv.dtype}")
    why = tilelang_refusal(num_heads, d_qk, d_v, indices.shape[-1])
    if why:
        raise TileLangRefused(why)
    kv3 = kv if kv.dim() == 3 else kv[:, None, :]
    rows = (indices if indices.dim() == 2 else indices[:, 0]).to(torch.int32)
    if topk_length is not None:
        slots = torch.arange(rows.shape[-1], device=rows.device)
        rows = torch.where(slots[None, :] < topk_length[:, None], rows, -1)
    padding = (-rows.shape[-1]) % BLOCK_I
    if padding:
        rows = torch.nn.functional.pad(rows, (0, padding), value=-1)
    first = num_heads not in peer.first_call_s
    start = time.perf_counter()
    out = peer.forward(q, kv3, rows[:, None, :].contiguous(), sm_scale, d_v)
    if first:
        if out.is_cuda:
            torch.cuda.synchronize()
        peer.first_call_s[num_heads] = time.perf_counter() - start
    return out.squeeze(0)
