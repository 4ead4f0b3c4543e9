"""The trained models glmcheck ships as package data (Hugging Face layout), under
`glmcheck/data/resources/trained_models/`.

`--model ref-cpu` (the default) and `--model ref-gpu` / `ref-gpu-fp8` name these checkpoints:
GLM-MoE-DSA models trained by `scripts/train_reference_model.py` (recipe:
`glmcheck.training.geometry`) that have learned language, so their next-token distributions are
peaked and their indexers select like a trained DSA indexer. They load through the same
`--checkpoint` path as a real GLM checkpoint; the seeded dummy presets stay available by name.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

# Package data: found where the package is installed (a wheel or a checkout alike), never through the source tree.
MODELS_DIR = Path(str(files("glmcheck") / "data" / "resources" / "trained_models"))
TRAINED_MODELS: dict[str, str] = {
    "ref-cpu": "trained CPU-sized GLM-MoE-DSA (tiny geometry: 8 heads, latent 64 + rope 16, index_topk 32, "
               "2,048-id tokenizer)",
    "ref-gpu": "trained GLM-MoE-DSA at the kernel's geometry (8 heads per call, latent 512 + rope 64, "
               "index_topk 2048, GLM-5.2 indexer schedule, 4,096-id tokenizer)",
    "ref-gpu-fp8": "ref-gpu in the GLM-5.x block-FP8 format (e4m3, 128 x 128 blocks, weight_scale_inv)",
}
DEFAULT_MODEL = "ref-cpu"


def is_trained(name: str | None) -> bool:
    """Whether `name` names one of the trained models (ref-cpu, ref-gpu, ref-gpu-fp8)."""
    return name in TRAINED_MODELS


def trained_checkpoint(name: str) -> Path:
    """The checkpoint folder of the trained model `name`; FileNotFoundError when it is not there."""
    if name not in TRAINED_MODELS:
        raise ValueError(f"unknown trained model {name!r}; expected one of {', '.join(TRAINED_MODELS)}")
    path = MODELS_DIR / name
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"trained model {name!r} is not at {path}: it ships in the glmcheck package "
                                f"(data/resources/trained_models/; reinstall glmcheck) or retrain it with "
                                f"scripts/train_reference_model.py")
    return path
