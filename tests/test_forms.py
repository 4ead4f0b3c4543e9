"""The band's and the fp32 reference's forms are options (issue 72 item 3): `CheckOptions.band_impl` /
`reference_impl` (--band-impl, --reference-impl; GLMCHECK_BAND_IMPL / GLMCHECK_REFERENCE_IMPL only their defaults),
run by every kernel of the check, shown by --profile and recorded (a resume with another form is refused in
tests/test_resume.py)."""

from __future__ import annotations

import pytest

from glmcheck.backends import forms
from glmcheck.backends.band_kernels import band_impl
from glmcheck.backends.reference import reference_impl
from glmcheck.evaluate.options import CheckOptions
from glmcheck.process.wording import cli_wording


def test_the_forms_are_options_whose_defaults_the_environment_sets(monkeypatch):
    monkeypatch.delenv(forms.BAND_ENV, raising=False)
    monkeypatch.delenv(forms.REFERENCE_ENV, raising=False)
    assert CheckOptions().forms() == forms.Forms("auto", "torch")
    monkeypatch.setenv(forms.BAND_ENV, "torch")
    monkeypatch.setenv(forms.REFERENCE_ENV, " Triton ")
    assert (CheckOptions().band_impl, CheckOptions().reference_impl) == ("torch", "triton"), "filled in"
    assert CheckOptions(band_impl="triton", reference_impl="torch").forms() == forms.Forms("triton", "torch")
    with pytest.raises(ValueError, match=r"^band_impl must be one of auto, torch, triton, got 'gpu'$"):
        CheckOptions(band_impl="gpu")
    with cli_wording(), pytest.raises(ValueError, match=r"^--reference-impl must be one of torch, triton, got 'x'$"):
        CheckOptions(reference_impl="x")
    monkeypatch.setenv(forms.BAND_ENV, "cuda")  # the variable's own error where it gave the value
    with pytest.raises(ValueError, match=r"^GLMCHECK_BAND_IMPL must be auto, torch or triton, got 'cuda'$"):
        CheckOptions()
    CheckOptions(band_impl="torch")  # a form given: the variable is not read


def test_the_kernels_run_the_forms_in_use_over_the_environment(monkeypatch):
    import torch

    monkeypatch.setenv(forms.BAND_ENV, "torch")
    monkeypatch.delenv(forms.REFERENCE_ENV, raising=False)
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert (band_impl(cpu), band_impl(cuda), reference_impl()) == ("torch", "torch", "torch")
    with forms.using(forms.Forms("auto", "triton")):
        assert (band_impl(cpu), band_impl(cuda), reference_impl()) == ("torch", "triton", "triton")
        with forms.using(forms.Forms("triton", "torch")):
            assert band_impl(cpu) == "triton" and reference_impl() == "torch"
        assert reference_impl() == "triton", "the outer forms again"
    assert reference_impl() == "torch" and band_impl(cuda) == "torch", "the environment's again"


def test_a_check_runs_and_records_its_forms(monkeypatch, tmp_path, capsys):
    """layer0 on tiny with its forward stubbed: the forms it runs under, the record's options (auto resolved for the
    device), --profile's line; the commands that reproduce a row name a form other than the default."""
    from glmcheck import cli
    from glmcheck.checks import layer0 as layer0_check
    from glmcheck.checks.diagnosis_text import check_command
    from glmcheck.commands.repro import rerun_arguments
    from glmcheck.evaluate import layer0
    from glmcheck.records.store import read_record

    seen = []

    def stub(*args, **kwargs):
        seen.append(forms.active())
        return layer0_check.CheckResult([], "PASS", {})

    monkeypatch.delenv(forms.BAND_ENV, raising=False)
    monkeypatch.delenv(forms.REFERENCE_ENV, raising=False)
    with monkeypatch.context() as stubbed:
        stubbed.setattr(layer0_check, "run_layer0", stub)
        report = layer0(CheckOptions(model="tiny", backends=["band:3"], band=1, reference_impl="triton", quiet=True),
                        tokens=8)
    assert seen == [forms.Forms("auto", "triton")] and forms.active() == forms.Forms(), "the check's, then none"
    assert (report.options["band_impl"], report.options["reference_impl"]) == ("torch", "triton"), "auto on the CPU"
    out = tmp_path / "run"
    code = cli.main(["layer0", "--model", "tiny", "--backends", "band:3", "--band", "1", "--tokens", "8",
                     "--reference-impl", "triton", "--profile", "--quiet", "--out", str(out)])
    assert code == 3, "a band of 1 is too small to judge: INCONCLUSIVE, with its record"
    assert "forms: band torch, fp32 reference triton" in capsys.readouterr().err
    assert read_record(out).summary["options"]["reference_impl"] == "triton"
    words = check_command("layer0", CheckOptions(model="tiny", band_impl="torch"), "mine", 8, 0)
    assert "--band-impl torch" in words and "--reference-impl" not in words
    summary = {"command": "layer0", "argv": ["glmcheck", "layer0", "--model", "tiny"],
               "rows": [{"backend": "mine", "verdict": "FAIL"}],
               "options": {"band_impl": "torch", "reference_impl": "triton"}}
    argv = rerun_arguments(summary, "mine", tmp_path / "repro")
    assert argv[argv.index("--band-impl") + 1] == "torch" and argv[argv.index("--reference-impl") + 1] == "triton"
