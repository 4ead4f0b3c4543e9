"""Kernels from outside glmcheck: an installed package's entry point and `name=module:function`,
through the library, `glmcheck backends` and a whole `glmcheck layer0` run."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from glmcheck import cli
from glmcheck.backends import registry

PLUGIN_DIR = Path(__file__).resolve().parent / "support" / "plugin"


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """A site directory holding the test plugin as pip installs a package: its modules and a
    .dist-info with METADATA and the entry points `mykernel` (works) and `brokenkernel` (its module
    fails to import), on sys.path for this test; the backends it registers are removed afterwards."""
    site = tmp_path / "site"
    site.mkdir()
    for module in ("glmcheck_test_plugin.py", "glmcheck_broken_plugin.py"):
        shutil.copy(PLUGIN_DIR / module, site / module)
    info = site / "glmcheck_test_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: glmcheck-test-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[glmcheck.backends]\n"
                                           "mykernel = glmcheck_test_plugin:sparse_prefill\n"
                                           "brokenkernel = glmcheck_broken_plugin:sparse_prefill\n")
    monkeypatch.syspath_prepend(str(site))
    before = set(registry._REGISTRY)
    yield site
    for name in set(registry._REGISTRY) - before:
        if not registry.is_band_name(name):  # band variants register themselves on first use, for good
            registry.unregister_backend(name)
    for module in ("glmcheck_test_plugin", "glmcheck_broken_plugin"):
        sys.modules.pop(module, None)


def test_entry_point_backend_resolves_and_records_its_source(installed):
    assert {"mykernel", "brokenkernel"} <= set(registry.backend_names())
    backend = registry.get_backend("mykernel")
    assert backend.name == "mykernel" and registry.backend_source("mykernel").startswith(
        "entry point of glmcheck-test-plugin (glmcheck_test_plugin:sparse_prefill)")
    with pytest.raises(ValueError, match=r"backend 'brokenkernel': cannot load glmcheck_broken_plugin:sparse_prefill "
                                         r"\(ModuleNotFoundError"):
        registry.get_backend("brokenkernel")


def test_backend_by_name_from_a_module_or_a_file(installed, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copy(PLUGIN_DIR / "glmcheck_test_plugin.py", tmp_path / "my_local_kernel.py")
    assert registry.resolve_backend("mine=my_local_kernel:sparse_prefill") == "mine"
    assert registry.resolve_backend("mine=my_local_kernel:sparse_prefill") == "mine", "the same spec twice"
    assert registry.backend_source("mine") == "--backends my_local_kernel:sparse_prefill"
    assert registry.resolve_backend(f"fromfile={tmp_path / 'my_local_kernel.py'}:sparse_prefill") == "fromfile"
    bad = {"nope=no_such_module_xyz:fn": "backend 'nope': cannot import no_such_module_xyz",
           "nope=my_local_kernel:missing": "backend 'nope': module my_local_kernel has no 'missing'",
           "nope=my_local_kernel:NOT_A_FUNCTION": "my_local_kernel:NOT_A_FUNCTION is a int, not a function",
           "nope=my_local_kernel": "expected NAME=MODULE:FUNCTION",
           "reference=my_local_kernel:sparse_prefill": "backend name 'reference' is taken",
           "nope=/no/such/file.py:fn": "backend file /no/such/file.py does not exist"}
    for spec, message in bad.items():
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            registry.resolve_backend(spec)


def test_backends_command_lists_every_source_and_what_runs_here(installed, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    shutil.copy(PLUGIN_DIR / "glmcheck_test_plugin.py", tmp_path / "my_local_kernel.py")
    assert cli.main(["backends", "--device", "cpu", "--backends", "mine=my_local_kernel:sparse_prefill"]) == 0
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:4]]
            for line in capsys.readouterr().out.splitlines()[2:]}
    assert rows["mykernel"] == ["entry point of glmcheck-test-plugin (glmcheck_test_plugin:sparse_prefill)", "yes"]
    assert rows["mine"] == ["--backends my_local_kernel:sparse_prefill", "yes"]
    assert rows["brokenkernel"][1].startswith("no: backend 'brokenkernel': cannot load")
    assert rows["reference"] == ["built in", "yes"] and rows["hf_sdpa"][0] == "transformers (no swap)"
    assert rows["flashmla_sparse"][1].startswith("no:")


def test_layer0_runs_an_installed_kernel_and_one_named_by_module(installed, tmp_path, monkeypatch, capsys):
    """The plug-in example (docs/kernel.md, "Putting your kernel under test"): both plugin kernels PASS on the tiny
    preset and are recorded."""
    monkeypatch.chdir(tmp_path)
    shutil.copy(PLUGIN_DIR / "glmcheck_test_plugin.py", tmp_path / "my_local_kernel.py")
    out = tmp_path / "run"
    code = cli.main(["layer0", "--model", "tiny", "--tokens", "32", "--quiet", "--out", str(out),
                     "--backends", "mykernel,mine=my_local_kernel:sparse_prefill"])
    assert code == 0, capsys.readouterr()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verdict"] == "PASS" and summary["options"]["backends"] == ["mykernel", "mine"]
    tested = {row["backend"] for row in summary["rows"]}
    assert {"mykernel", "mine"} <= tested


def test_a_plugin_that_does_not_load_is_one_line_and_exit_2(installed, tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.main(["layer0", "--model", "tiny", "--tokens", "32", "--out", str(out),
                     "--backends", "brokenkernel"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "backend 'brokenkernel': cannot load glmcheck_broken_plugin" in err[0]
    assert not out.exists(), "a run that failed validation left a record behind"
