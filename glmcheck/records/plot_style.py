"""What every record plot shares: the figure size, a verdict's colour, the band's and cross-checks' colours, the
markers that keep backends apart, and how a band row is named in a record's rows."""

from __future__ import annotations

FIGSIZE = (7.5, 4.2)  # inches
VERDICT_COLORS = {"PASS": "tab:green", "FAIL": "tab:red", "INCONCLUSIVE": "tab:orange"}
FLIP_COLOR = "black"  # a first-token flip: not a verdict, so not FAIL's red
BAND_COLOR, INFO_COLOR = "0.6", "tab:blue"  # the band's rows; rows shown but not judged (cross-checks)
MARKERS = "os^Dv<>pPX*h"  # one a backend, so backends drawn on the same points stay apart


def is_band_row(comparison: str) -> bool:
    """Whether a row's `comparison` names one of the noise band's samples."""
    return comparison.startswith("noise band:")
