"""Attention backends: one signature, selected by name (see registry); outside kernels through
installed packages' entry points or `name=module:function` (see plugins).

The names below are importable from `glmcheck.backends` directly; the registry (and with it torch and the kernels) is
imported on first use, so that the light modules of this package (`names`, `forms`) stay light."""

from __future__ import annotations

__all__ = ["Backend", "backend_names", "flashmla_available", "get_backend", "register_backend", "resolve_backend",
           "unregister_backend"]


def __getattr__(name: str):
    if name not in __all__:
        raise AttributeError(f"module 'glmcheck.backends' has no attribute {name!r}")
    from glmcheck.backends import registry

    return getattr(registry, name)
