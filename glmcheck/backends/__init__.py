"""Attention backends: one signature, selected by name (see registry)."""

from glmcheck.backends.registry import (
                                       Backend,
                                       backend_names,
                                       flashmla_available,
                                       get_backend,
                                       register_backend,
                                       unregister_backend,
)

__all__ = ["Backend", "backend_names", "get_backend", "flashmla_available", "register_backend", "unregister_backend"]
