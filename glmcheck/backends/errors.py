"""The errors of backends: a choice that cannot run (`BackendError`, bad usage), and a backend under test that
broke its contract while running (`KernelFault`, a FAIL of that backend)."""


class BackendError(ValueError):
    """A backend choice that cannot run here; the message says why and what would."""


class KernelFault(RuntimeError):
    """A backend raised while it ran, or returned an output outside the kernel contract (shape [T, H, d_v], dtype
    bf16, q's device). The checks turn it into a FAIL row naming `backend` and `reason` (the other rows and the record
    stay); it is not bad input. `reason` is one line."""

    def __init__(self, backend: str, reason: str):
        self.backend, self.reason = backend, reason
        super().__init__(f"backend {backend!r} {reason}")


def first_line(err: BaseException, limit: int = 200) -> str:
    """`err`'s message, its first line, cut to `limit` characters ('no message' when it has none)."""
    text = str(err).strip()
    line = text.splitlines()[0] if text else "no message"
    return line if len(line) <= limit else line[: limit - 3] + "..."
