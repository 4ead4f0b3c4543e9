"""A set of forward hooks on a model that can be paused (evaluations) and removed."""

from __future__ import annotations

import contextlib


class HookSet:
    """Holds hook handles; hooks check `active` and do nothing while `paused()`."""

    def __init__(self):
        self.handles: list = []
        self.active = True

    @contextlib.contextmanager
    def paused(self):
        """Forwards inside are not seen by the hooks (evaluations between training steps)."""
        self.active = False
        try:
            yield
        finally:
            self.active = True

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []
