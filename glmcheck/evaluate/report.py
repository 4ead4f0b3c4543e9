"""What one check returns: its rows, verdict and facts, with what it ran on (model, options,
environment), ready to print (`render`) or to write as a record (`write`)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from glmcheck.checks.band import exit_code
from glmcheck.records.environment import environment_metadata
from glmcheck.records.layout import clear_record
from glmcheck.records.render import render
from glmcheck.records.store import write_record


@dataclass
class Report:
    """One check's result. `rows` are the record's rows (dicts), `verdict` PASS / FAIL / INCONCLUSIVE,
    `facts` the check's own facts (gate, band, prompt source...), `model` and `options` what it ran on,
    `extra` further summary fields (firsttoken's per-backend rows), `tensors` what `--save-tensors` keeps (or a
    zero-argument function that makes it when the record is written).
    `is_main` is False on torchrun ranks other than 0 (they write and print nothing)."""

    command: str
    verdict: str
    rows: list[dict]
    facts: dict
    model: dict
    options: dict
    warnings: list[str] = field(default_factory=list)
    extra: dict = field(default_factory=dict)
    tensors: dict | None = None
    is_main: bool = True
    record_dir: Path | None = None  # where a resumable run kept its items (its record belongs there)

    @property
    def exit_code(self) -> int:
        """0 PASS, 1 FAIL, 3 INCONCLUSIVE (the CLI's exit codes)."""
        return exit_code(self.verdict)

    def summary(self, argv: list[str] | None = None) -> dict:
        """The record's summary.json: command line, environment, model, options, facts, rows, verdict."""
        return {"command": self.command, "argv": sys.argv if argv is None else argv,
                "environment": environment_metadata(), "model": self.model, "options": self.options,
                "warnings": self.warnings, "facts": self.facts, "rows": self.rows, "verdict": self.verdict,
                **self.extra}

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows)

    def render(self, form: str = "text") -> str:
        """The tables `glmcheck report` prints for this record, in `form` (`glmcheck.records.render.FORMATS`: text
        fits 120 columns; md, wide, json)."""
        return render(self.summary(), self.frame(), form)

    def write(self, directory: Path, *, save_tensors: bool = False, overwrite: bool = False) -> Path:
        """Write the record to `directory` atomically (summary last); `overwrite` first removes the
        record that was there (other files stay)."""
        if overwrite:
            clear_record(directory)
        tensors = (self.tensors() if callable(self.tensors) else self.tensors) if save_tensors else None
        write_record(directory, self.summary(), self.frame(), tensors)
        return directory
