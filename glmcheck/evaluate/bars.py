"""The progress bar of a check: on stderr, one step a forward (or a server request), drawn at every step (a
forward takes seconds, so no update is throttled away), cleared when the check ends, none when `quiet`."""

from __future__ import annotations

import sys

from tqdm import tqdm


def forward_bar(total: int, desc: str, quiet: bool, initial: int = 0, unit: str = "forward") -> tqdm:
    """A bar of `total` steps named `desc`, `initial` of them done already (a resumed run)."""
    return tqdm(total=total, initial=initial, desc=desc, disable=quiet, leave=False, file=sys.stderr, unit=unit,
                mininterval=0, miniters=1, dynamic_ncols=True)
