"""Bad inputs at every public entry point: a documented exception (library) or exit 2 (CLI)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from glmcheck import cli
from glmcheck.backends import get_backend
from glmcheck.checks import metrics
from glmcheck.checks.band import FAIL, Band, Gate
from glmcheck.data.inputs import random_inputs
from glmcheck.kernels import sparse_mla_prefill, union_dedup
from glmcheck.model import build_dummy_model, make_config
from glmcheck.records.store import write_record


@pytest.fixture
def inp(device):
    return random_inputs(12, 8, 40, 16, 64, 16, seed=3, device=device)


def test_non_contiguous_inputs_are_supported(inp):
    q_strided = inp.q.transpose(0, 1).contiguous().transpose(0, 1)  # same values, token stride != H*d
    assert not q_strided.is_contiguous()
    base = sparse_mla_prefill(inp.q, inp.kv, inp.indices, inp.sm_scale, 64)
    assert torch.equal(sparse_mla_prefill(q_strided, inp.kv, inp.indices, inp.sm_scale, 64), base)
    idx_strided = inp.indices.t().contiguous().t()
    assert torch.equal(sparse_mla_prefill(inp.q, inp.kv, idx_strided, inp.sm_scale, 64), base)


def test_duplicates_detected_only_when_asked(inp):
    indices = inp.indices.clone()
    indices[4, 3] = indices[4, 7]
    with pytest.raises(ValueError, match=r"indices row 4 names KV row .* twice"):
        sparse_mla_prefill(inp.q, inp.kv, indices, inp.sm_scale, 64, check_inputs=True)
    with pytest.raises(ValueError, match=r"indices row 4 names KV row .* twice"):
        union_dedup(indices, 2, check_inputs=True)
    sparse_mla_prefill(inp.q, inp.kv, indices, inp.sm_scale, 64)  # the documented contract: not checked
    empty_dupes = inp.indices.clone()
    empty_dupes[2, :4] = -1  # repeated empty slots are not duplicates
    sparse_mla_prefill(inp.q, inp.kv, empty_dupes, inp.sm_scale, 64, check_inputs=True)


@pytest.mark.parametrize("target", ["q", "kv"])
@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_non_finite_inputs(inp, target, value):
    q, kv = inp.q.clone(), inp.kv.clone()
    (q if target == "q" else kv).view(-1)[5] = value
    with pytest.raises(ValueError, match=f"{target} contains NaN or Inf"):
        sparse_mla_prefill(q, kv, inp.indices, inp.sm_scale, 64, check_inputs=True)
    out = sparse_mla_prefill(q, kv, inp.indices, inp.sm_scale, 64)
    ref = sparse_mla_prefill(inp.q, inp.kv, inp.indices, inp.sm_scale, 64)
    if not torch.isfinite(out).all():  # the NaN reached an output: no metric may pass it
        assert math.isnan(metrics.cosine(out, ref)) and math.isnan(metrics.rel_l2(out, ref))
        assert Gate(cap=1.0).judge({"rel_l2": metrics.rel_l2(out, ref)}, Band({"rel_l2": [1.0]}))[0] == FAIL


def test_metrics_never_pass_nan():
    a = torch.ones(4)
    b = torch.tensor([1.0, math.nan, 1.0, 1.0])
    assert math.isnan(metrics.cosine(a, b)) and math.isnan(metrics.rel_l2(b, a)) and math.isnan(metrics.max_abs(a, b))
    zeros = torch.zeros(3)
    assert metrics.cosine(zeros, zeros) == 1.0 and metrics.rel_l2(zeros, zeros) == 0.0
    assert metrics.rel_l2(torch.ones(3), torch.zeros(3)) == math.inf
    with pytest.raises(ValueError, match="same shape"):
        metrics.cosine(torch.ones(3), torch.ones(4))
    band = Band({"rel_l2": [1.0]})
    assert Gate().judge({"rel_l2": math.nan}, band)[0] == FAIL and Gate().judge({"rel_l2": math.inf}, band)[0] == FAIL


def test_union_dedup_bad_inputs(device):
    idx = torch.zeros((4, 4), dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match="indices must have shape"):
        union_dedup(idx[0], 2)
    with pytest.raises(TypeError, match=r"topk_length must be torch\.int32"):
        union_dedup(idx, 2, torch.zeros(4, dtype=torch.int64, device=device))
    with pytest.raises(ValueError, match=r"topk_length must have shape \[4\]"):
        union_dedup(idx, 2, torch.zeros(3, dtype=torch.int32, device=device))
    with pytest.raises(ValueError, match="num_kv_rows must be non-negative"):
        union_dedup(idx, 2, num_kv_rows=-1)
    empty = union_dedup(idx[:0], 2)
    assert empty.lengths.numel() == 0


@pytest.mark.parametrize("name", ["reference", "reference:fp64", "torch_bf16", "triton_sparse_mla"])
def test_backends_validate_like_the_kernel(inp, name):
    backend = get_backend(name)
    with pytest.raises(TypeError, match=r"q must be torch\.bfloat16"):
        backend(inp.q.float(), inp.kv, inp.indices, inp.sm_scale, 64)
    with pytest.raises(ValueError, match="indices must have 12 rows"):
        backend(inp.q, inp.kv, inp.indices[:3], inp.sm_scale, 64)


def test_model_builder_bad_inputs():
    with pytest.raises(ValueError, match="experts must be a positive int"):
        make_config("tiny", experts=0)
    with pytest.raises(ValueError, match="init must be one of hf, sharp"):
        build_dummy_model(make_config("tiny"), init="wide")


def test_out_that_overlaps_itself_is_refused(inp):
    """An `out` from .expand() would have every token write the same memory: refused, named."""
    out = torch.empty((1, 8, 64), dtype=torch.bfloat16, device=inp.q.device).expand(12, 8, 64)
    with pytest.raises(ValueError, match=r"out must not overlap itself"):
        sparse_mla_prefill(inp.q, inp.kv, inp.indices, inp.sm_scale, 64, out=out)
    strided = torch.empty((12, 8, 80), dtype=torch.bfloat16, device=inp.q.device)[..., :64]
    sparse_mla_prefill(inp.q, inp.kv, inp.indices, inp.sm_scale, 64, out=strided)  # a strided view is fine


# ---- the command line: every usage or input error is one line, exit 2, nothing written ----------

UNWRITABLE = "/proc/glmcheck-unwritable"  # no file can be created there, not even by root
HUGE_SEED = str(10**21)
TINY_CHECKPOINT = str(Path(__file__).resolve().parents[1] / "fixtures" / "tiny-bf16")


@pytest.fixture
def bad_files(tmp_path, monkeypatch):
    """The inputs the cases name ({tmp}/...), and an empty working directory (where runs/ would go)."""
    (tmp_path / "file.txt").write_text("not a directory")
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "broken.jsonl").write_text('{"prompt": "fine"}\n{not json\n')
    (tmp_path / "huge.jsonl").write_text(json.dumps({"id": "huge", "prompt": "word " * 200_000}) + "\n")
    (tmp_path / "no-summary").mkdir()
    write_record(tmp_path / "bad-record", {"command": "layer0", "verdict": "PASS"}, [{"comparison": "x"}])
    write_record(tmp_path / "mixed-record", {"command": "firsttoken", "facts": {}, "verdict": "PASS"},
                 [{"comparison": "x"}])
    write_record(tmp_path / "no-verdict", {"command": "layer0"}, [{"comparison": "x"}])
    (tmp_path / "resume" / "items").mkdir(parents=True)
    (tmp_path / "resume" / "items" / "stray.json").write_text('{"payload": 1}')
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    return tmp_path


MODEL_CASES = [  # (args, words in the one error line)
    (["layer0", "--out", "{tmp}/file.txt"], "--out {tmp}/file.txt is a file"),
    (["layer0", "--out", f"{UNWRITABLE}/run"], f"--out {UNWRITABLE}/run: cannot write in"),
    (["layer0", "--tokens", "1000000000"], "--tokens 1000000000: more than the model's"),
    (["layer0", "--tokens", "0"], "--tokens must be an int >= 1"),
    (["layer0", "--seed", HUGE_SEED], "--seed must be an int in [0, 2**63 - 1]"),
    (["layer0", "--seed", "-1"], "--seed must be an int in [0, 2**63 - 1]"),
    (["layer0", "--backends", ""], "--backends names no backend"),
    (["layer0", "--backends", ","], "--backends names no backend"),
    (["layer0", "--backends", "nope"], "unknown backend 'nope'"),
    (["layer0", "--backends", "mine=no_such_module_xyz:fn"], "backend 'mine': cannot import no_such_module_xyz"),
    (["layer0", "--backends", "flashmla_sparse"], "flashmla_sparse"),
    (["layer0", "--checkpoint", TINY_CHECKPOINT, "--layers", "1000"], "--layers 1000 does not apply to --checkpoint"),
    (["layer0", "--checkpoint", TINY_CHECKPOINT, "--experts", "3"], "--experts 3 does not apply to --checkpoint"),
    (["layer0", "--layers", "0"], "--layers must be an int >= 1"),
    (["layer0", "--experts", "0"], "--experts must be an int >= 1"),
    (["layer0", "--checkpoint", "{tmp}/file.txt"], "is a file; expected a checkpoint directory"),
    (["layer0", "--checkpoint", "{tmp}/absent"], "does not exist"),
    (["layer0", "--gate-ratio", "nan"], "--gate-ratio must be a number in [1, 4]"),
    (["layer0", "--gate-ratio", "0"], "--gate-ratio must be a number in [1, 4]"),
    (["layer0", "--gate-ratio", "0.5"], "--gate-ratio must be a number in [1, 4] (below 1 the band's own samples"),
    (["firsttoken", "--gate-ratio", "1e9"], "--gate-ratio must be a number in [1, 4]"),
    (["layer0", "--max-rel-l2", "-1"], "--max-rel-l2 must be a finite number > 0"),
    (["layer0", "--max-rel-l2", "inf"], "--max-rel-l2 must be a finite number > 0"),
    (["layer0", "--tp", "3"], "--tp must divide the 8 attention heads"),
    (["layer0", "--text", "x" * 100_000], "--text (tokens) 100001: more than the model's"),
    (["logits", "--tokens", "0"], "--tokens must be a comma-separated list"),
    (["logits", "--tokens", ""], "--tokens must be a comma-separated list"),
    (["logits", "--tokens", "64,1000000000"], "--tokens 1000000000: more than the model's"),
    (["logits", "--out", "{tmp}/file.txt"], "--out {tmp}/file.txt is a file"),
    (["logits", "--seed", HUGE_SEED], "--seed must be an int"),
    (["logits", "--dense-threshold", "-1"], "--dense-threshold must be an int >= 0"),
    (["logits", "--tokens", "24", "--out", "{tmp}/resume", "--backends", "torch_bf16"], "is not a glmcheck item"),
    (["firsttoken", "--prompts", "{tmp}/huge.jsonl"], "prompt 'huge' of tokens"),
    (["firsttoken", "--prompts", "{tmp}/empty.jsonl"], "is empty"),
    (["firsttoken", "--prompts", "{tmp}/broken.jsonl"], "broken.jsonl"),
    (["firsttoken", "--prompts", "nonexistent50"], "nonexistent50"),
    (["firsttoken", "--tie-gap", "nan"], "--tie-gap must be a number of nats in [0, 1]"),
    (["firsttoken", "--tie-gap", "inf"], "--tie-gap must be a number of nats in [0, 1]"),
    (["firsttoken", "--max-dlogprob", "-1"], "--max-dlogprob must be a finite number > 0"),
    (["firsttoken", "--continue", "-1"], "--continue must be an int >= 0"),
    (["firsttoken", "--limit", "0"], "limit"),
    (["firsttoken", "--seed", HUGE_SEED], "--seed must be an int"),
    (["firsttoken", "--out", "{tmp}/file.txt"], "--out {tmp}/file.txt is a file"),
    (["drift", "--tokens", "0"], "--tokens must be an int >= 1"),
    (["drift", "--out", "{tmp}/file.txt"], "--out {tmp}/file.txt is a file"),
    (["drift", "--seed", HUGE_SEED], "--seed must be an int"),
    (["drift", "--tp", "3"], "--tp must divide the 8 attention heads"),
] + [([command, "--out", f"{UNWRITABLE}/run"], f"--out {UNWRITABLE}/run: cannot write in")
     for command in ("logits", "firsttoken", "drift")]

OTHER_CASES = [
    (["report", "{tmp}/no-summary"], "no summary.json"),
    (["report", "{tmp}/absent"], "does not exist"),
    (["report", "{tmp}/bad-record"], "rows.parquet: no column 'backend' (a layer0 record's rows need"),
    (["report", "{tmp}/mixed-record"], "rows.parquet: no column 'prompt_id' (a firsttoken record's rows need"),
    (["report", "{tmp}/no-verdict"], "summary.json: verdict None is not one of PASS, FAIL, INCONCLUSIVE"),
    (["capture-indices", "--tokens", "0", "--out", "{tmp}/t.safetensors"], "--tokens must be an int >= 1"),
    (["capture-indices", "--tokens", "8", "--batch", "0", "--out", "{tmp}/t.safetensors"], "--batch must be an int"),
    (["capture-indices", "--tokens", "8", "--out", "{tmp}"], "is a directory; expected a file path"),
    (["capture-indices", "--tokens", "8", "--out", "{tmp}/t.txt"], "must end in .safetensors"),
    (["capture-indices", "--tokens", "8", "--out", f"{UNWRITABLE}/t.safetensors"], "cannot write in"),
    (["capture-indices", "--tokens", "8", "--seed", HUGE_SEED, "--out", "{tmp}/t.safetensors"], "--seed must be"),
    (["capture-indices", "--tokens", "100000000", "--out", "{tmp}/t.safetensors"], "--tokens x --batch 100000000"),
    (["capture-indices", "--tokens", "8", "--backend", "nosuch", "--out", "{tmp}/t.safetensors"],
     "unknown backend 'nosuch'"),
    (["capture-indices", "--tokens", "8", "--backend", "hf_eager", "--out", "{tmp}/t.safetensors"],
     "absorbed sparse path"),
    (["union-stats", "--indices", "{tmp}/absent.safetensors"], "does not exist"),
    (["union-stats", "--out", "{tmp}/file.txt"], "--out {tmp}/file.txt is a file"),
    (["union-stats", "--seed", HUGE_SEED], "--seed must be"),
    (["union-stats", "--topk", "0"], "--topk must be an int >= 1"),
    (["union-stats", "--out", f"{UNWRITABLE}/run"], "cannot write in"),
    (["bench", "--out", f"{UNWRITABLE}/run"], "cannot write in"),
    (["kernel-check", "--d-v", "48"], "d_v must be a power of two"),
    (["kernel-check", "--seed", HUGE_SEED], "--seed must be"),
    (["selftest", "--seed", HUGE_SEED], "--seed must be"),
    (["bench", "--out", "{tmp}/file.txt"], "--out {tmp}/file.txt is a file"),
    (["plan", "--tokens", "0"], "--tokens must be an int >= 1, got 0"),
    (["backends", "--heads", "0"], "--heads must be a positive int"),
    (["backends", "--backends", "nope"], "unknown backend 'nope'"),
]


# Checkpoints whose tensors disagree with their config.json (tests/support/checkpoints.py): every
# command that loads a checkpoint names the tensor and both shapes, before anything is built.
KV_B0, KV_B2 = "model.layers.0.self_attn.kv_b_proj.weight", "model.layers.2.self_attn.kv_b_proj.weight"
CHECKPOINT_WORDS = {
    "shape0": f"shape0': tensor {KV_B0} is [256, 64] in model-00002-of-00004.safetensors, but config.json implies "
              f"[512, 64]",
    "shape2": f"shape2': tensor {KV_B2} is [256, 64] in model-00004-of-00004.safetensors, but config.json implies "
              f"[512, 64]",
    "missing0": f"missing0': lacks tensor {KV_B0} (config.json implies [512, 64]; model.safetensors.index.json does "
                f"not list it)",
    "missing2": "missing2': lacks tensor model.layers.2.mlp.experts.3.down_proj.weight (config.json implies [256, 64]",
    "fp8-scale": f"fp8-scale': tensor {KV_B0}_scale_inv is [2, 1] in model-00002-of-00004.safetensors, but a "
                 f"[512, 64] FP8 weight in 128x128 blocks needs [4, 1]",
    "fp8-weight2": f"fp8-weight2': tensor {KV_B2} is [256, 64] in model-00004-of-00004.safetensors, but config.json "
                   f"implies [512, 64]",
}
CHECKPOINT_COMMANDS = {  # command -> its extra args; each runs on every broken checkpoint
    "layer0": [], "logits": ["--tokens", "24"], "drift": ["--tokens", "24"], "firsttoken": ["--limit", "2"],
    "capture-indices": ["--tokens", "8", "--out", "{tmp}/t.safetensors"],
}
CHECKPOINT_CASES = [([command, "--checkpoint", f"{{ckpt}}/{name}", *extra], words)
                    for command, extra in CHECKPOINT_COMMANDS.items() for name, words in CHECKPOINT_WORDS.items()]
# A checkpoint that loads but holds NaN (0xFF bytes in a shard): its exact reference is NaN, which is bad input
# naming the weight, not a kernel FAIL (issue 44, item 5). --out: a resumable run without one makes runs/<name>;
# torch_bf16: no interpreter warning line.
NAN_WHAT = {"layer0": "layer-0 output", "logits": "logits at 24 tokens", "drift": "hidden state at layer 0",
            "firsttoken": "logits on prompt"}
NAN_CASES = [([command, "--checkpoint", "{ckpt}/nan0", "--out", "{tmp}/nan-run", "--backends", "torch_bf16",
               *CHECKPOINT_COMMANDS[command]],
              f"the exact reference (reference) gives NaN/Inf {what}") for command, what in NAN_WHAT.items()]
NAN_CASES[0] = (NAN_CASES[0][0], f"layer-0 output (128 tokens): bad input (weight {KV_B0} holds NaN/Inf), not a "
                                 f"kernel fault" if not torch.cuda.is_available() else f"weight {KV_B0} holds NaN/Inf")

SIZE_CASES = [  # sizes that cannot be allocated or would run for hours: refused up front, the limit named
    (["union-stats", "--synthetic", "--topk", "1000000000"], "--topk 1000000000: at most 8192, the longest synthetic"),
    (["union-stats", "--topk", "8193"], "--topk 8193: at most 8192"),
    (["kernel-check", "--kv-rows", "100000000000"], "--kv-rows 100000000000 --topk"),
    (["kernel-check", "--kv-rows", "100000000000", "--device", "cpu"],
     "GiB (inputs, references, outputs), more than the"),
    (["kernel-check", "--tokens", "1000000", "--device", "cpu"], "would take about 29.5 hours on the CPU"),
    (["kernel-check", "--tokens", "64", "--heads", "128", "--kv-rows", "4096", "--topk", "2048", "--d-v", "512",
      "--d-tail", "64", "--device", "cpu"], "the CPU limit is 10 minutes"),
    (["kernel-check", "--heads", "1000"], "--heads 1000: the kernel takes 1..128 heads"),
    (["kernel-check", "--d-tail", "12"], "--d-tail 12: the rope tail must be 0 or a power of two"),
    (["kernel-check", "--d-tail", "-16"], "--d-tail -16: the rope tail must be 0 or a power of two"),
    (["kernel-check", "--tokens", "64", "--kv-rows", "256", "--topk", "300"], "--topk 300 exceeds --kv-rows 256"),
    (["plan", "--layers", "100000"], "--layers 100000: at most 312 layers (4 x the 78 of GLM-5.x"),
    (["plan", "--experts", "1000000000000"], "--experts 1000000000000: at most 1024 routed experts"),
    (["plan", "--gpu-gib", "nan"], "--gpu-gib must be a finite number > 0"),
    (["layer0", "--layers", "100000"], "--layers 100000: at most 312 layers"),
    (["layer0", "--experts", "1000000000000"], "--experts 1000000000000: at most 1024"),
    (["logits", "--layers", "313"], "--layers 313: at most 312 layers"),
    (["drift", "--band", "1000"], "--band 1000: at most 16 variants (the band family has 16"),
    (["logits", "--tokens", ",".join(str(24 + n) for n in range(10_000))], "10000 lengths x 11 forwards each"),
    (["firsttoken", "--continue", "4000"], "50 prompts x 11 forwards x 4001 steps"),
    (["firsttoken", "--band", "17"], "--band 17: at most 16 variants"),
    (["capture-indices", "--tokens", "8", "--layers", "100000", "--out", "{tmp}/t.safetensors"],
     "--layers 100000: at most 312"),
    (["capture-indices", "--tokens", "8", "--experts", "100000", "--out", "{tmp}/t.safetensors"],
     "--experts 100000: at most 1024"),
    (["capture-indices", "--tokens", "5000", "--out", "{tmp}/t.safetensors"], "--tokens 5000: more than the model's"),
    (["selftest", "--model", "tiny", "--seeds", "1000000000"], "model forwards, more than the limit of 100,000"),
    (["selftest", "--model", "tiny", "--tokens", "1000000000"], "--tokens 1000000000: more than the model's 4096"),
    (["selftest", "--model", "tiny", "--band", "15"], "--band 15: at most 14 variants"),
    (["selftest", "--model", "ref-cpu", "--checkpoint", "{tmp}"], "give --model or --checkpoint, not both"),
    (["selftest", "--checkpoint", "{tmp}/nope"], "does not exist"),
    (["selftest", "--model", "ref-cpu", "--checks", "layer0,tasks"], "--checks must name some of"),
    (["bench", "--model", "glm-5.2", "--layers", "100000"], "--layers 100000: at most 312"),
]


@pytest.fixture(scope="module")
def broken_checkpoints(tmp_path_factory):
    from tests.support.checkpoints import broken_checkpoints as make

    base = tmp_path_factory.mktemp("broken-checkpoints")
    make(base)
    return base


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


CLI_CASES = MODEL_CASES + OTHER_CASES + CHECKPOINT_CASES + NAN_CASES + SIZE_CASES


def _case_id(value):
    if not isinstance(value, list):
        return None
    text = " ".join(value).replace("{ckpt}/", "").replace("{tmp}/", "")
    return text if len(text) <= 70 else text[:60] + f"..{len(text)}"


@pytest.mark.parametrize("args, words", CLI_CASES, ids=_case_id)
def test_cli_bad_inputs_exit_2_with_one_line_and_write_nothing(args, words, bad_files, broken_checkpoints, capsys):
    args = [a.replace("{tmp}", str(bad_files)).replace("{ckpt}", str(broken_checkpoints)) for a in args]
    before, checkpoints = _tree(bad_files), _tree(broken_checkpoints)
    code = cli.main(args + (["--quiet"] if args[0] in ("layer0", "logits", "drift", "firsttoken", "selftest") else []))
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert words.replace("{tmp}", str(bad_files)) in err, err
    assert _tree(bad_files) == before, "a run that failed validation left files behind"
    assert _tree(broken_checkpoints) == checkpoints, "a run wrote into a checkpoint directory"


def test_the_matrix_counts_its_cases():
    """docs/reliability.md names this count, of this file's cases and tests/test_records_and_usage.py's (records
    that would be destroyed, options that do not apply); keep them equal."""
    from tests.test_records_and_usage import CASES as RECORD_CASES

    text = (Path(__file__).resolve().parents[1] / "docs" / "reliability.md").read_text()
    assert f"{len(CLI_CASES) + len(RECORD_CASES)} cases over every subcommand" in text


def test_corrected_rerun_with_the_same_out_runs(bad_files, capsys):
    """After an exit-2 error nothing was written, so the corrected command with the same --out runs."""
    out = str(bad_files / "fresh")
    assert cli.main(["logits", "--tokens", "0", "--out", out, "--quiet", "--backends", "torch_bf16"]) == 2
    assert not Path(out).exists()
    assert cli.main(["logits", "--tokens", "24", "--out", out, "--quiet", "--backends", "torch_bf16"]) == 0, \
        capsys.readouterr().err


def test_report_plots_refuse_a_record_they_cannot_write(bad_files, monkeypatch, capsys):
    """A read-only record (root writes anywhere, so the write probe is made to fail here) is one line."""
    from glmcheck.evaluate import arguments as options
    assert cli.main(["union-stats", "--out", str(bad_files / "stats")]) == 0
    real = options.tempfile.mkstemp

    def refuse(*args, dir=None, **kwargs):  # noqa: A002  (mkstemp's own keyword)
        if Path(dir) == bad_files / "stats":
            raise PermissionError(13, "Permission denied")
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(options.tempfile, "mkstemp", refuse)
    capsys.readouterr()
    assert cli.main(["report", "--plots", str(bad_files / "stats")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--plots: cannot write in" in err and "Permission denied" in err, err
    assert not list((bad_files / "stats").glob("*.png"))


def test_report_reads_union_stats_records(bad_files, capsys):
    assert cli.main(["union-stats", "--out", str(bad_files / "stats")]) == 0
    printed = capsys.readouterr().out
    assert cli.main(["report", str(bad_files / "stats")]) == 0
    assert capsys.readouterr().out.strip() == printed.split("record:")[0].strip()
