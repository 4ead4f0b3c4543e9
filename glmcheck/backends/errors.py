"""The error of a backend choice that cannot run."""


class BackendError(ValueError):
    """A backend choice that cannot run here; the message says why and what would."""
