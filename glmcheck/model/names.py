"""The names `--model` takes, without importing torch or transformers (the command line builds its
parsers from them before any heavy import)."""

from __future__ import annotations

from glmcheck.model.presets import PRESETS
from glmcheck.model.trained import TRAINED_MODELS


def model_names() -> list[str]:
    """Every name `--model` takes: the trained models, then the dummy presets."""
    return list(TRAINED_MODELS) + list(PRESETS)


def models_epilog() -> str:
    """The models every `--model` takes, described once (`glmcheck --help`)."""
    import textwrap

    texts = [f"{name}: {text}" for name, text in TRAINED_MODELS.items()]
    texts += [f"{name}: {p.description} (seeded dummy weights)" for name, p in PRESETS.items()]
    return "models (--model):\n" + "\n".join(textwrap.fill(t, 100, initial_indent="  ", subsequent_indent="    ")
                                               for t in texts)
