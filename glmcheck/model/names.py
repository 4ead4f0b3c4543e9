"""The names `--model` takes, without importing torch or transformers (the command line builds its
parsers from them before any heavy import)."""

from __future__ import annotations

from glmcheck.model.presets import PRESETS
from glmcheck.model.trained import TRAINED_MODELS


def model_names() -> list[str]:
    """Every name `--model` takes: the trained models, then the dummy presets."""
    return list(TRAINED_MODELS) + list(PRESETS)
