"""The wheel carries what the checks read (issue 58): built from this checkout, installed without -e into a
folder of its own, it runs layer0 on the default trained model (ref-cpu) and firsttoken on natural50 from a directory
outside the checkout (the models, the held-out corpus and the prompt sets are package data)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(site folder, a working directory outside the checkout) with the wheel installed there."""
    tmp = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(tmp / "dist"), str(ROOT)], check=True, capture_output=True)
    wheel = next((tmp / "dist").glob("glmcheck-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"glmcheck/data/resources/trained_models/ref-cpu/config.json",
            "glmcheck/data/resources/prompts/natural50.jsonl", "glmcheck/data/resources/corpus/heldout.jsonl.gz",
            "glmcheck/data/resources/sample_records/layer0/summary.json"} <= names  # the notebook's sample too
    assert not [n for n in names if n.endswith(".png")], "plots no check reads (issue 73)"
    info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
    assert f"{info}/licenses/LICENSE" in names
    metadata = zipfile.ZipFile(wheel).read(f"{info}/METADATA").decode()
    assert "License-Expression: Apache-2.0" in metadata and "Author: glmcheck developers" in metadata
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(tmp / "site"),
                    str(wheel)], check=True, capture_output=True)
    (tmp / "elsewhere").mkdir()
    return tmp / "site", tmp / "elsewhere"


def _run(installed, *args: str) -> subprocess.CompletedProcess:
    site, cwd = installed
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run([str(site / "bin" / "glmcheck"), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600, check=False)


def test_the_versions_that_run_here_are_inside_the_declared_ranges():
    """The ranges in pyproject.toml are the tested versions: CI's (and the GPU machine's) torch, triton and
    transformers must lie inside them, so a range that drifts from what is tested fails here."""
    import tomllib
    from importlib.metadata import version

    from packaging.requirements import Requirement

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    ranges = {r.name: r.specifier for r in map(Requirement, declared)}
    for name in ("torch", "triton", "transformers"):
        installed = version(name).split("+")[0]  # 2.13.0+cpu: the local label is not part of the range
        assert ranges[name].contains(installed), (name, installed, str(ranges[name]))
        assert ranges[name].contains("99") is False, f"{name}: no upper bound, so an untested release would install"


def test_the_installed_copy_is_the_one_that_runs(installed):
    site, cwd = installed
    found = subprocess.run([sys.executable, "-c", "import glmcheck; print(glmcheck.__file__)"], cwd=cwd,
                           env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True, text=True,
                           check=False).stdout
    assert found.strip() == str(site / "glmcheck" / "__init__.py"), found


def test_layer0_and_firsttoken_run_from_the_wheel(installed):
    site, cwd = installed
    layer0 = _run(installed, "layer0", "--backends", "band:5", "--quiet", "--out", "l0")
    assert layer0.returncode == 0, layer0.stderr[-2000:]
    summary = json.loads((cwd / "l0" / "summary.json").read_text())
    assert summary["model"]["trained"] == "ref-cpu" and "held-out" in summary["facts"]["prompt_source"]
    resources = site / "glmcheck" / "data" / "resources"
    assert summary["model"]["checkpoint"] == str(resources / "trained_models" / "ref-cpu")
    first = _run(installed, "firsttoken", "--prompts", "natural50", "--limit", "2", "--backends", "band:5", "--quiet",
                 "--out", "ft")
    assert first.returncode in (0, 3), first.stderr[-2000:]
    rows = json.loads((cwd / "ft" / "summary.json").read_text())["rows"]
    assert {r["prompt_id"] for r in rows} == {"natural-01", "natural-02"}
