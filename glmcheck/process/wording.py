"""How an error names an argument: a library caller reads the Python argument's name (`tokens`), a command-line
user the flag's (`--tokens`). Light module (no torch): the CLI enters `cli_wording` before anything else runs, and
every layer that checks an argument names it through `flag`."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

_CLI_WORDING = contextvars.ContextVar("glmcheck_cli_wording", default=False)
# Python argument -> flag, where the flag is not `--` + the name with dashes.
IRREGULAR_FLAGS = {"continue_tokens": "--continue", "logprobs_k": "--logprobs", "record_dir": "--out",
                   "prompt_set": "--prompts"}


def flag(name: str) -> str:
    """How an error names the argument `name` (a Python argument of the library, `tokens`): as it is for a library
    caller, as its flag (`--tokens`) while the command line runs (`cli_wording`)."""
    if not _CLI_WORDING.get():
        return name
    return IRREGULAR_FLAGS.get(name, "--" + name.replace("_", "-"))


@contextlib.contextmanager
def cli_wording() -> Iterator[None]:
    """Within: argument errors name command-line flags (`flag`). The CLI runs every command inside it."""
    token = _CLI_WORDING.set(True)
    try:
        yield
    finally:
        _CLI_WORDING.reset(token)


def error_line(err: BaseException) -> str:
    """The one line the CLI prints for a usage error: its message's first line. An OS error that names no file
    (`[Errno 2] No such file or directory` from a working directory removed while the command ran, say) names the
    place it was raised instead, so that no such error leaves its reader guessing which file it meant."""
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    if isinstance(err, OSError) and err.filename is None and err.__traceback__ is not None:
        frame = err.__traceback__
        while frame.tb_next is not None:
            frame = frame.tb_next
        code = frame.tb_frame.f_code
        text += f" (raised in {code.co_filename}:{frame.tb_lineno}, {code.co_name})"
    return text
