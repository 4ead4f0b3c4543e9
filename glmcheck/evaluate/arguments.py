"""Checks of argument values and paths (the CLI's options and the library's arguments alike), run before any model
is built or any file written.

Each raises ValueError naming the option and what it expected, which the CLI prints as one line
with exit 2.
"""

from __future__ import annotations

import math
import numbers
import os
import tempfile
from pathlib import Path

from glmcheck.process.wording import flag

MAX_SEED = 2**63 - 1  # torch.Generator.manual_seed takes a 64-bit seed; argparse takes any int


def check_seed(seed: int, option: str | None = None) -> None:
    """`seed` is an int in [0, 2**63 - 1] (`option` names it: default the argument `seed`, `flag`)."""
    option = option or flag("seed")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ValueError(f"{option} must be an int in [0, 2**63 - 1], got {seed!r}")


def check_count(value: int | None, option: str, minimum: int = 1) -> None:
    """`value` (when given) is an int >= minimum."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{option} must be an int >= {minimum}, got {value!r}")


def check_text(text: object, option: str | None = None) -> None:
    """`text` (when given) is a prompt with something in it (`option` names it: default the argument `text`): an
    empty one would run the model on its start token alone."""
    if text is not None and not (isinstance(text, str) and text.strip()):
        raise ValueError(f"{option or flag('text')} must be a non-empty prompt text, got {text!r}")


def check_lengths(tokens: object, option: str | None = None) -> None:
    """`tokens` (when given) is a non-empty list of prompt lengths, each an int >= 1 (`option` names it: default the
    argument `tokens`)."""
    if tokens is None:
        return
    option = option or flag("tokens")
    if isinstance(tokens, (str, bytes)) or not hasattr(tokens, "__iter__"):
        raise ValueError(f"{option} must be a list of prompt lengths, got {tokens!r}")
    lengths = list(tokens)
    if not lengths:
        raise ValueError(f"{option} names no prompt length (an empty list)")
    for length in lengths:
        check_count(length, option)


def check_number(value: float | None, option: str, *, positive: bool = False) -> None:
    """`value` (when given) is finite and >= 0 (> 0 when `positive`)."""
    if value is None:
        return
    bad = not isinstance(value, numbers.Real) or isinstance(value, bool) or not math.isfinite(value) \
        or value < 0 or (positive and value == 0)
    if bad:
        raise ValueError(f"{option} must be a finite number {'> 0' if positive else '>= 0'}, got {value!r}")


# The largest --tie-gap: a reference whose top-1 is e (2.7) times as likely as its top-2 has made a choice, and a
# kernel that flips it is no near tie; a larger gap would excuse such flips, and 1e9 every flip.
MAX_TIE_GAP = 1.0


def check_tie_gap(value: object, option: str | None = None) -> None:
    """ValueError naming `option` (default the argument `tie_gap`) unless `value` (when given) is a number of nats
    in [0, MAX_TIE_GAP]."""
    if value is None:
        return
    option = option or flag("tie_gap")
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value <= MAX_TIE_GAP:
        raise ValueError(f"{option} must be a number of nats in [0, {MAX_TIE_GAP:g}] (a top-1 "
                         f"{math.exp(MAX_TIE_GAP):.1f} x as likely as the top-2 is a choice, not a near tie), got "
                         f"{value!r}")


def check_writable_dir(path: Path, option: str) -> None:
    """A file can be created in `path` (an existing directory): probed, not guessed from mode bits."""
    try:
        handle, probe = tempfile.mkstemp(dir=path, prefix=".glmcheck-probe-")
    except OSError as err:
        raise ValueError(f"{option}: cannot write in {path} ({err.strerror or type(err).__name__})") from None
    os.close(handle)
    os.unlink(probe)


def _existing_parent(path: Path) -> Path:
    try:
        parent = path.absolute().parent
    except FileNotFoundError:  # os.getcwd() of a working directory removed since the command started
        raise ValueError(f"{path}: the working directory no longer exists (removed while glmcheck ran?); run from "
                         f"an existing directory or give an absolute path") from None
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(f"{parent} is a file, not a directory")
    return parent


def _check_named(path: str, option: str, what: str) -> None:
    if not path.strip():  # Path("") is the working directory: a run would write its record among its files
        raise ValueError(f"{option} {path!r} names no {what}" + (f" (leave {option} out for runs/<command>-<timestamp>)"
                                                                 if what == "directory" else ""))


def check_out_dir(path: str | None, option: str = "--out", *, overwrite: bool = False,
                  resumable: bool = False) -> None:
    """`path` can hold a record: a new or empty directory, or one to resume, whose place is writable;
    None checks the default, runs/ under the working directory (a fresh runs/<command>-<timestamp>).

    An existing record of another run (any command) or a non-empty directory that is not a record is
    refused unless `overwrite` (the run then replaces the record: `glmcheck.records.layout.clear_record`;
    other files stay). A `resumable` command leaves a directory holding a resumable run's items/ to its
    `ItemStore`, which resumes the same run and refuses another's."""
    from glmcheck.records.layout import holds_record, occupant, resumable_items

    if path is not None:
        _check_named(path, option, "directory")
    target = Path(path) if path is not None else Path("runs")
    if target.exists() and not target.is_dir():
        raise ValueError(f"{option} {target} is a file; expected a record directory (new, or one to resume)")
    try:
        place = target if target.is_dir() else _existing_parent(target)
    except ValueError as err:
        raise ValueError(f"{option} {target}: {err}") from None
    check_writable_dir(place, f"{option} {target}")
    if path is None or overwrite or (resumable and resumable_items(target)):
        return
    held = occupant(target)
    if held is not None:
        allow = "to replace it" if holds_record(target) else "to write the record among them"
        raise ValueError(f"{option} {target} already holds {held}; use another {option}, or --overwrite {allow}")


def check_repro_dir(path, option: str | None = None) -> None:
    """`path` (when given) can hold the minimal repros of a run: a new or empty directory in a writable place
    (`option` names it: default the argument `repro`)."""
    if path is not None:
        check_out_dir(str(path), option or flag("repro"))


def check_out_file(path: str, option: str = "--out", suffix: str | None = None, *, overwrite: bool = False) -> None:
    """`path` can be written as a file: not a directory, with the given suffix, in a writable place,
    and not an existing file unless `overwrite`."""
    _check_named(path, option, "file")
    target = Path(path)
    if target.is_dir():
        raise ValueError(f"{option} {target} is a directory; expected a file path")
    if suffix and target.suffix != suffix:
        raise ValueError(f"{option} {target} must end in {suffix}")
    if target.exists() and not overwrite:
        raise ValueError(f"{option} {target} already exists; use another {option}, or --overwrite to replace it")
    try:
        check_writable_dir(_existing_parent(target), f"{option} {target}")
    except ValueError as err:
        raise ValueError(str(err) if str(err).startswith(option) else f"{option} {target}: {err}") from None


# ---- sizes: what cannot be allocated, or would run for hours, is refused before anything is built ----

GLM5_LAYERS = 78
MAX_LAYERS = 4 * GLM5_LAYERS  # --layers N keeps the preset's first N layers (its schedule extended past its depth)
GLM5_EXPERTS = 256
MAX_EXPERTS = 4 * GLM5_EXPERTS
MAX_FORWARDS = 100_000  # ~200 x a default firsttoken run (50 prompts x ~10 forwards)


def check_layers(value: int | None, option: str | None = None) -> None:
    """`value` (when given) is an int in [1, MAX_LAYERS]. --layers keeps a preset's first N layers (its
    indexer schedule extended past the preset's depth); a model several times deeper than GLM-5.x's
    78 layers is none of the presets, and only laying out its module skeleton on the meta device,
    which every memory estimate does, takes minutes (10,000 layers: 15 s, growing faster than
    linearly)."""
    option = option or flag("layers")
    check_count(value, option)
    if value is not None and value > MAX_LAYERS:
        raise ValueError(f"{option} {value}: at most {MAX_LAYERS} layers (4 x the {GLM5_LAYERS} of GLM-5.x; "
                         f"it keeps a preset's first N layers, and a deeper model takes minutes just to "
                         f"lay out)")


def check_experts(value: int | None, option: str | None = None) -> None:
    """`value` (when given) is an int in [1, MAX_EXPERTS]: routed experts per MoE layer, 256 in GLM-5.x;
    a fused expert stack of 10^12 experts overflows even the meta device's size arithmetic."""
    option = option or flag("experts")
    check_count(value, option)
    if value is not None and value > MAX_EXPERTS:
        raise ValueError(f"{option} {value}: at most {MAX_EXPERTS} routed experts (4 x the {GLM5_EXPERTS} of "
                         f"GLM-5.x; each MoE layer holds all of them in one fused weight stack)")


def check_band(value: int, option: str | None = None, held_out: int = 0) -> None:
    """`value` is an int in [1, BAND_FAMILY_SIZE - held_out]: the band's variants are the flash-style
    kernels of `glmcheck.backends.band_kernels` (16, each once), of which `held_out` are kept out of
    the band (the rates run holds out 2); a larger band would fail only after the model is built."""
    from glmcheck.backends.names import BAND_FAMILY_SIZE

    option = option or flag("band")
    check_count(value, option)
    limit = BAND_FAMILY_SIZE - held_out
    if value > limit:
        held = f"; this run holds {held_out} of them out of the band" if held_out else ""
        raise ValueError(f"{option} {value}: at most {limit} variants (the band family has {BAND_FAMILY_SIZE} "
                         f"flash-style kernels, each block size x order x normaliser once{held})")


def check_forwards(count: int, what: str) -> None:
    """ValueError naming `what` (the options that multiply) when a run needs more than MAX_FORWARDS
    model forwards: about two days of the tiny preset on the CPU (~1.5 s a forward in the Triton
    interpreter at 128 tokens), longer at GLM-5.x size on any GPU."""
    if count > MAX_FORWARDS:
        raise ValueError(f"{what}: {count:,} model forwards, more than the limit of {MAX_FORWARDS:,} (~200 default "
                         f"firsttoken runs; about two days of tiny on the CPU, longer at GLM-5.x size)")

