"""GLM-5.x model harness: presets, seeded dummy weights, the attention swap, TP emulation.

The names below are imported on first use (PEP 562), so that importing a light submodule
(`glmcheck.model.trained`, `glmcheck.model.presets`, `glmcheck.model.names`) does not import
torch and the model code: the command line parses its options and checks them before that.
"""

from __future__ import annotations

import importlib

_LAZY = {"build_dummy_model": "build", "PRESETS": "presets", "make_config": "presets", "preset_names": "presets",
         "use_backend": "swap", "SwapSession": "swap"}

__all__ = ["PRESETS", "SwapSession", "build_dummy_model", "make_config", "preset_names", "use_backend"]


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(f"glmcheck.model.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'glmcheck.model' has no attribute {name!r}")
