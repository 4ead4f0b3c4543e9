"""The sample run records the drift notebook reads by default: package data (`glmcheck/data/resources/
sample_records/`, written by today's commands with `python scripts/make_sample_records.py`), so the notebook finds
them from an installed wheel as from a clone."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

SAMPLE_RECORDS = Path(str(files("glmcheck") / "data" / "resources" / "sample_records"))


def sample_records_dir() -> Path:
    """The folder of the sample records (one record a subfolder: layer0, drift, firsttoken, logits, union-stats)."""
    return SAMPLE_RECORDS
