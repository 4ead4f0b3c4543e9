"""Backend validation before any model is built, so a bad choice costs nothing.

`validate_backend(name, device=..., heads_per_rank=..., deterministic=...)` raises
`BackendError` for a choice that cannot run and returns the warnings to show for one that runs
with caveats:
- `triton_sparse_mla*` on ROCm or on CUDA capability < 9.0: error; on the CPU (Triton's
  interpreter): a warning that it is slow and meant for small shapes; on a CUDA architecture
  without a tuned tile: a warning naming the default tile.
- a union group that is illegal for the heads per rank: error naming the legal choices
  (the kernel called directly falls back silently instead);
- `deterministic`: union backends run the per-token path, with a warning;
- `flashmla_sparse`: error unless on CUDA capability 9.x with FlashMLA loadable, and (when
  `latent_dims` is given) the model's latent is 512 + 64 rope (d_qk 576), the only one it takes;
- `flashmla_kv`: the same, and an FP8 KV cache (`kv_cache_dtype` "fp8_e4m3"): it reads the FP8 pool.
"""

from __future__ import annotations

import torch

from glmcheck.backends.errors import BackendError
from glmcheck.backends.flashmla import LATENT_DIMS, flashmla_supports
from glmcheck.backends.registry import backend_names, flashmla_available, resolve_backend
from glmcheck.kernels.tiles import DEFAULT_TILE, TILE_TABLE
from glmcheck.kernels.union import legal_groups, union_is_legal

HF_NAMES = ("hf_eager", "hf_sdpa")


def all_backend_names() -> list[str]:
    """Kernel-level backends plus transformers' own (unswapped) attention."""
    return backend_names() + list(HF_NAMES)


def union_group(name: str) -> int:
    """G of a `triton_sparse_mla:unionG` name, 0 otherwise."""
    if name.startswith("triton_sparse_mla:union"):
        return int(name.rsplit("union", 1)[1])
    return 0


def _check_triton_device(device: torch.device) -> list[str]:
    if device.type == "cpu":
        return ["triton_sparse_mla runs in Triton's CPU interpreter: slow, meant for small shapes"]
    if device.type != "cuda":
        raise BackendError(f"triton_sparse_mla needs a CUDA GPU (or the CPU interpreter), got device {device}")
    if torch.version.hip is not None:
        raise BackendError("triton_sparse_mla is not supported on ROCm")
    capability = torch.cuda.get_device_capability(device)
    if capability < (9, 0):
        raise BackendError(f"triton_sparse_mla needs CUDA capability >= 9.0, this GPU has {capability}")
    if capability not in TILE_TABLE:
        return [f"no tuned tile for CUDA capability {capability}; using the default tile {DEFAULT_TILE}"]
    return []


def validate_backend(name: str, *, device: torch.device, heads_per_rank: int,
                     deterministic: bool = False, latent_dims: tuple[int, int] | None = None,
                     kv_cache_dtype: str | None = None) -> list[str]:
    """Raise BackendError if `name` cannot run; return warnings otherwise (see module docstring).
    A backend of an installed package's entry point is loaded here (`resolve_backend`)."""
    if name not in HF_NAMES:
        resolve_backend(name)
    warnings: list[str] = []
    if name.startswith("triton_sparse_mla"):
        warnings += _check_triton_device(device)
        group = union_group(name)
        if group and deterministic:
            warnings.append(f"{name}: deterministic mode forces the per-token path (union off)")
        elif group and not union_is_legal(heads_per_rank, group):
            legal = legal_groups(heads_per_rank)
            choices = ", ".join(f"triton_sparse_mla:union{g}" for g in legal) or "none (use triton_sparse_mla)"
            raise BackendError(f"{name} is illegal with {heads_per_rank} heads per rank (G*H must be a power "
                               f"of two in [16, 64]); legal union backends here: {choices}")
    if name == "flashmla_kv" and kv_cache_dtype != "fp8_e4m3":
        raise BackendError("flashmla_kv reads the FP8 KV pool: run it with --kv-cache-dtype fp8_e4m3")
    if name in ("flashmla_sparse", "flashmla_kv"):
        if not flashmla_supports(latent_dims):
            raise BackendError(f"{name} takes a {LATENT_DIMS[0]} + {LATENT_DIMS[1]} rope latent (d_qk "
                               f"{sum(LATENT_DIMS)}) only; this model's is {latent_dims[0]} + {latent_dims[1]}")
        if device.type != "cuda" or torch.cuda.get_device_capability(device)[0] != 9:
            raise BackendError(f"{name} needs an SM90 GPU (H100/H200), got device {device}")
        ok, why = flashmla_available()
        if not ok:
            raise BackendError(why)
    return warnings


def resolve_backend_names(specs: list[str]) -> list[str]:
    """The backend names `specs` stand for (transformers' own as they are; entry points and
    `name=module:function` loaded and registered: `resolve_backend`)."""
    return [spec if spec in HF_NAMES else resolve_backend(spec) for spec in specs]


def validate_backends(names: list[str], *, device: torch.device, heads: int, tp: int,
                      deterministic: bool = False, latent_dims: tuple[int, int] | None = None,
                      kv_cache_dtype: str | None = None) -> list[str]:
    """Validate the TP degree and every backend; returns warnings, raises ValueError/BackendError."""
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1 or heads % tp:
        raise ValueError(f"tp must be a positive int dividing the {heads} attention heads, got {tp!r}")
    if not names:
        raise ValueError("backends must name at least one backend")
    warnings: list[str] = []
    for name in dict.fromkeys(names):
        warnings += validate_backend(name, device=device, heads_per_rank=heads // tp, deterministic=deterministic,
                                     latent_dims=latent_dims, kv_cache_dtype=kv_cache_dtype)
    return list(dict.fromkeys(warnings))
