"""Which backends a model check runs: the ones named (or the default set for this device, head count
and latent geometry), the exact reference, the baseline kernel, each validated before any model is built."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from glmcheck.backends import flashmla_available
from glmcheck.backends.flashmla import flashmla_supports
from glmcheck.backends.names import band_names
from glmcheck.backends.validation import resolve_backend_names, validate_backends
from glmcheck.kernels.union import legal_groups


def _flashmla_here(device: torch.device, latent_dims: tuple[int, int] | None) -> bool:
    return (device.type == "cuda" and torch.cuda.get_device_capability(device)[0] == 9
            and flashmla_supports(latent_dims) and flashmla_available()[0])


def default_backends(device: torch.device, heads_per_rank: int,
                     latent_dims: tuple[int, int] | None = None, kv_cache_dtype: str | None = None) -> list[str]:
    """The kernels under test and the independent cross-checks that can run here for this head count
    (and latent geometry, when given). The naive `torch_bf16` baseline is left to `--backends`: its
    bf16 scores put it outside the band at GLM-5.2 scale (1.09e-2 on the H200), so in the default set
    it would fail every default run for a reason that is not the kernel's. Over an FP8 KV cache FlashMLA's FP8
    kernel (`flashmla_kv`, the engines' pick there) joins FlashMLA's bf16 one."""
    names = ["triton_sparse_mla"]
    names += [f"triton_sparse_mla:union{g}" for g in legal_groups(heads_per_rank)]
    names += ["hf_sdpa"]
    if _flashmla_here(device, latent_dims):
        names.append("flashmla_sparse")
        if kv_cache_dtype == "fp8_e4m3":
            names.append("flashmla_kv")
    return names


@dataclass(frozen=True)
class BackendChoice:
    """The backends to run (the baseline included), the baseline (None: none) and the warnings to print."""

    backends: list[str]
    baseline: str | None
    warnings: list[str]


def choose_backends(named: list[str] | None, *, device: torch.device, heads: int, tp: int,
                    latent_dims: tuple[int, int], band_size: int, exact: str, baseline: str | None,
                    deterministic: bool, kv_cache_dtype: str | None = None) -> BackendChoice:
    """`named` (None: `default_backends`) resolved and validated with the exact reference; `baseline` None is
    FlashMLA where it runs, "none" or "" none. ValueError when no backend is under test (the exact reference,
    the band's variants and hf_* cross-checks are not judged) or one cannot run here."""
    if named is None:
        named = default_backends(device, heads // tp, latent_dims, kv_cache_dtype)
    backends = resolve_backend_names(named)
    band = band_names(band_size)
    if not [b for b in backends if b != exact and b not in band and not b.startswith("hf_")]:
        raise ValueError(f"--backends names no backend under test (got {', '.join(backends)}; the exact reference, "
                         f"the band's band:0..{band_size - 1} and hf_* cross-checks are not judged)")
    if baseline is None:
        baseline = "flashmla_sparse" if _flashmla_here(device, latent_dims) else None
    chosen = None if baseline in (None, "", "none") else resolve_backend_names([baseline])[0]
    if chosen is not None and chosen not in backends:
        backends.append(chosen)
    warnings = validate_backends([exact] + backends, device=device, heads=heads, tp=tp, deterministic=deterministic,
                                 latent_dims=latent_dims, kv_cache_dtype=kv_cache_dtype)
    return BackendChoice(backends, chosen, warnings)
