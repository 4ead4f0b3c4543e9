"""GLM-5.x model harness: presets, seeded dummy weights, the attention swap, TP emulation."""

from glmcheck.model.build import build_dummy_model
from glmcheck.model.presets import PRESETS, make_config, preset_names
from glmcheck.model.swap import SwapSession, use_backend

__all__ = ["PRESETS", "make_config", "preset_names", "build_dummy_model", "use_backend", "SwapSession"]
