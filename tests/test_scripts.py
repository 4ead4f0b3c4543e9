"""The GPU session script documents every step it runs."""

from __future__ import annotations

import pathlib
import re

SCRIPTS = pathlib.Path(__file__).resolve().parents[1] / "scripts"


def test_gpu_session_documents_every_step_it_runs():
    """Each `case` label of scripts/gpu_session.sh is named in its usage line and in the error
    message of a missing STEP, so a step added to the case is documented where users look."""
    text = (SCRIPTS / "gpu_session.sh").read_text()
    steps = re.findall(r"^  ([a-z0-9]+)\)", text, flags=re.MULTILINE)
    usage = re.search(r"gpu_session\.sh OUTDIR (\S+)", text).group(1).split("|")
    missing = re.search(r"step=\$\{2:\?STEP: ([^}]+)\}", text).group(1)
    assert "accuracy" in steps and "bench" in steps and "contract" in steps
    assert sorted(steps) == sorted(usage), "the usage line and the case disagree"
    assert all(re.search(rf"\b{step}\b", missing) for step in steps), "the STEP message misses a step"
    for test_file in re.findall(r"tests/(test_\w+\.py)", text):
        assert (SCRIPTS.parent / "tests" / test_file).is_file(), f"gpu_session.sh runs a missing {test_file}"
