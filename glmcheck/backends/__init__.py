"""Attention backends: one signature, selected by name (see registry); outside kernels through
installed packages' entry points or `name=module:function` (see plugins)."""

from glmcheck.backends.registry import (
                                       Backend,
                                       backend_names,
                                       flashmla_available,
                                       get_backend,
                                       register_backend,
                                       resolve_backend,
                                       unregister_backend,
)

__all__ = ["Backend", "backend_names", "get_backend", "flashmla_available", "register_backend", "resolve_backend",
           "unregister_backend"]
