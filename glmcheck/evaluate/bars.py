"""The progress bar of a check: on stderr, one step a forward (or a server request). On a terminal a tqdm bar drawn
at every step (a forward takes seconds, so no update is throttled away) and cleared when the check ends; on a
redirected stderr (a log file, a pipe) no carriage-return bar but a line at every ~10 % of the steps and at the
last, with the elapsed time and an ETA; nothing when `quiet`."""

from __future__ import annotations

import math
import sys
import time
from typing import Self

from tqdm import tqdm


class LineProgress:
    """What a redirected stderr gets instead of a bar: `desc: n/total units (p %), s elapsed, ETA s` at every
    ~10 % of the steps and at the last (tqdm's `update` / `close` / context manager)."""

    def __init__(self, total: int, desc: str, initial: int = 0, unit: str = "forward", stream=None):
        self.total, self.desc, self.n, self.unit = total, desc, initial, unit
        self.stream = stream or sys.stderr
        self.start, self.first = time.monotonic(), initial
        self.every = max(1, math.ceil(total / 10))
        self.next = min(total, initial + self.every)

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.n >= self.next or self.n >= self.total:
            self._line()
            self.next = min(self.total, self.n + self.every)

    def _line(self) -> None:
        elapsed = time.monotonic() - self.start
        done = self.n - self.first
        eta = f", ETA {elapsed / done * (self.total - self.n):.0f} s" if done and self.n < self.total else ""
        share = f" ({self.n / self.total:.0%})" if self.total else ""
        print(f"{self.desc}: {self.n}/{self.total} {self.unit}s{share}, {elapsed:.0f} s elapsed{eta}",
              file=self.stream, flush=True)

    def close(self) -> None:
        pass

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def forward_bar(total: int, desc: str, quiet: bool, initial: int = 0, unit: str = "forward") -> tqdm | LineProgress:
    """A bar of `total` steps named `desc`, `initial` of them done already (a resumed run)."""
    if not quiet and not _is_terminal(sys.stderr):
        return LineProgress(total, desc, initial, unit)
    return tqdm(total=total, initial=initial, desc=desc, disable=quiet, leave=False, file=sys.stderr, unit=unit,
                mininterval=0, miniters=1, dynamic_ncols=True)


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or not a file
        return False
