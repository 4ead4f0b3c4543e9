"""FP8 weights resident (`--weights fp8`): codes and block scales held, dequantised just in time, bit for bit the
bf16 load; its cuts for tensor-parallel ranks, its memory, and a check's rows equal to the bf16 path's."""

from __future__ import annotations

import shutil

import pytest
import torch

from glmcheck.model import make_config
from glmcheck.model.checkpoint import load_checkpoint_model
from glmcheck.model.checkpoint_shard import load_checkpoint_shard
from glmcheck.model.fp8_blocks import quantize_blocks
from glmcheck.model.fp8_build import build_resident, dummy_sources
from glmcheck.model.fp8_checkpoint import load_resident_checkpoint
from glmcheck.model.fp8_codes import BlockFP8, dequantize_codes, regular_columns
from glmcheck.model.fp8_resident import held_bytes, resident_tensors
from glmcheck.model.trained import trained_checkpoint
from glmcheck.model.weight_bytes import rank_weights
from tests.support.checkpoints import FP8, add_tokenizer
from tests.support.plan_table import plan_cells


def dense_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every tensor a module reads, by its plain name (a resident weight dequantised, as its module sees it)."""
    state = {}
    for name, tensor in model.state_dict().items():
        if ".parametrizations." in name:
            owner, leaf = name.split(".parametrizations.")
            leaf = leaf.split(".")[0]
            state[f"{owner}.{leaf}"] = getattr(model.get_submodule(owner), leaf)
        else:
            state[name] = tensor
    return state


def test_resident_weights_are_the_bf16_load_bit_for_bit():
    """Whole (tiny-fp8 and the trained ref-gpu-fp8, against transformers' dequantize=True load) and per rank (against
    the shard loader's load-time dequantisation, cuts inside a 128 block included)."""
    for path in (FP8, trained_checkpoint("ref-gpu-fp8")):
        loaded, resident = load_checkpoint_model(path).state_dict(), dense_state(load_resident_checkpoint(path))
        assert loaded.keys() == resident.keys()
        differing = [n for n in loaded
                     if loaded[n].dtype != resident[n].dtype or not torch.equal(loaded[n], resident[n])]
        assert not differing, f"{path}: {differing[:3]}"
    for rank in (0, 1):
        shard = load_checkpoint_shard(FP8, rank=rank, world=2).state_dict()
        resident = dense_state(load_resident_checkpoint(FP8, rank=rank, world=2))
        assert all(torch.equal(shard[n], resident[n]) for n in shard), f"rank {rank}"


def test_transformers_dequantisation_agrees_only_where_its_blocks_are_128():
    """transformers' FineGrainedFP8 dequantize=True takes the block from the scale grid (rows / scale rows): right on
    tiny-fp8, whose dimensions are multiples of 128 or one block; on ref-gpu-fp8 it reads the 192-wide q_a / q_b
    projections in 96-wide blocks, twice the quantisation error of the 128-blocks they were written in (so glmcheck
    dequantises FP8 checkpoints itself, `checkpoint.load_checkpoint_model`)."""
    from transformers import FineGrainedFP8Config, GlmMoeDsaForCausalLM

    from glmcheck.checks import metrics

    def hf(path):
        return GlmMoeDsaForCausalLM.from_pretrained(path, dtype=torch.bfloat16, local_files_only=True,
                                                    quantization_config=FineGrainedFP8Config(dequantize=True))

    ours, theirs = load_checkpoint_model(FP8).state_dict(), hf(FP8).state_dict()
    assert all(torch.equal(ours[n].to(theirs[n].dtype), theirs[n]) for n in theirs if "mlp.gate." not in n)
    path = trained_checkpoint("ref-gpu-fp8")
    ours, theirs = load_checkpoint_model(path).state_dict(), hf(path).state_dict()
    bf16 = load_checkpoint_model(trained_checkpoint("ref-gpu")).state_dict()
    differing = [n for n in theirs if "mlp.gate." not in n and not torch.equal(ours[n], theirs[n])]
    assert differing and all(any(d % 128 and d > 128 for d in ours[n].shape) for n in differing), differing
    for name in differing:
        ratio = metrics.rel_l2(ours[name], bf16[name]) / metrics.rel_l2(theirs[name], bf16[name])
        assert ratio < 0.9, name


def test_dummy_fp8_weights_are_the_fp8_checkpoint_of_the_dummy_weights():
    """--model tiny --weights fp8 quantises the seeded weights as write_fp8 stored fixtures/tiny-fp8 (seed 0, sharp):
    the same codes and scales, whole and for each rank of 2."""
    config = make_config("tiny")
    for world in (1, 2):
        for rank in range(world):
            fp8, dense = dummy_sources(config, rank=rank, world=world, device="cpu", seed=0, init="sharp")
            built = build_resident(config, rank=rank, world=world, device="cpu", fp8=fp8, dense=dense).state_dict()
            loaded = load_resident_checkpoint(FP8, rank=rank, world=world).state_dict()
            assert built.keys() == loaded.keys()
            assert all(torch.equal(built[n], loaded[n]) for n in built), (world, rank)


@pytest.mark.parametrize("shape, kind, world", [((300, 200), "rows", 3), ((300, 200), "cols", 4),
                                                ((3, 2 * 96, 130), "gate_up", 2), ((3, 130, 192), "experts_cols", 3),
                                                ((512, 256), "rows", 4)])
def test_a_cut_inside_a_block_keeps_the_blocks_it_reads(shape, kind, world):
    """Cutting the codes and scales of a rank equals cutting the dequantised whole, bit for bit, wherever the cut falls
    (a fused stack's gate and up rows quantised apart, as the files store them)."""
    from glmcheck.model.sharding import slicer

    values = torch.randn(shape, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    halves = values.chunk(2, dim=-2) if kind == "gate_up" else [values]
    whole = BlockFP8.cat_rows([BlockFP8.quantize(h) for h in halves])
    name = {"rows": "self_attn.q_b_proj.weight", "cols": "self_attn.o_proj.weight",
            "gate_up": "mlp.experts.gate_up_proj", "experts_cols": "mlp.experts.down_proj"}[kind]
    for rank in range(world):
        part = whole.cut(kind, rank, world).compact()
        assert torch.equal(part.dequantize(), slicer(name, rank, world)(whole.dequantize())), rank
        assert part.scale.shape[-2] * part.scale.shape[-1] <= whole.scale.shape[-2] * whole.scale.shape[-1]


def test_dequantisation_is_the_load_time_formula_in_any_chunks():
    """bf16(float(code) x scale): the same bits chunked by matrices or by rows, broadcast or expanded scales."""
    values = torch.randn(4, 256, 384, generator=torch.Generator().manual_seed(2)) * torch.logspace(-3, 2, 384)
    codes, scale = quantize_blocks(values.to(torch.bfloat16))
    expected = torch.stack([(codes[e].float() * scale[e].repeat_interleave(128, 0).repeat_interleave(128, 1))
                            .to(torch.bfloat16) for e in range(4)])
    weight = BlockFP8.from_blocks(codes, scale)
    assert regular_columns(weight.cols, 128)
    for chunk in (1 << 26, 256 * 384 * 2, 1000, 384):
        for regular in (True, False):
            got = dequantize_codes(codes, weight.scale, weight.rows, weight.cols, regular, 128, chunk=chunk)
            assert torch.equal(got.view(torch.int16), expected.view(torch.int16)), (chunk, regular)


def test_an_expert_stack_is_dequantised_once_per_forward_whatever_the_implementation():
    """The eager experts implementation indexes a stack per expert; the stack is still dequantised once."""
    model = load_resident_checkpoint(FP8)
    calls: dict[str, int] = {}
    for name, step in resident_tensors(model).items():
        step.register_forward_hook(lambda m, a, o, name=name: calls.__setitem__(name, calls.get(name, 0) + 1))
    ids = torch.randint(0, 512, (1, 24), generator=torch.Generator().manual_seed(3))
    for implementation in ("eager", "grouped_mm"):
        model.set_experts_implementation(implementation)
        calls.clear()
        with torch.inference_mode():
            model(ids)
        stacks = {n: c for n, c in calls.items() if ".experts." in n}
        assert len(stacks) == 4 and set(stacks.values()) == {1}, (implementation, stacks)


def test_resident_holds_at_most_about_six_tenths_of_the_bf16_bytes():
    """Counted from the tensors: the whole of tiny-fp8 (whose embeddings and lm_head, kept bf16, are a third of its
    bytes), and its FP8-held tensors alone; the plan's fp8 terms are the model's own bytes."""
    resident, bf16 = held_bytes(load_resident_checkpoint(FP8)), held_bytes(load_checkpoint_model(FP8))
    assert resident["total"] <= 0.63 * bf16["total"], (resident, bf16)
    fp8_bf16_bytes = sum(2 * step.rows.numel() * step.cols.numel() * step.weight_scale_inv.shape[:-2].numel()
                         for step in resident_tensors(load_resident_checkpoint(FP8)).values())
    assert resident["codes"] + resident["scales"] <= 0.53 * fp8_bf16_bytes
    planned = rank_weights(load_checkpoint_model(FP8).config, 1, "fp8")
    rotary = 64  # the two non-persistent rotary buffers the plan does not count
    assert (planned.codes, planned.scales, planned.dense + rotary) == (resident["codes"], resident["scales"],
                                                                       resident["dense"])


@pytest.fixture(scope="module")
def fp8_with_tokenizer(tmp_path_factory):
    root = tmp_path_factory.mktemp("fp8") / "tiny-fp8"
    shutil.copytree(FP8, root)
    return add_tokenizer(root)


@pytest.mark.parametrize("check", ["layer0", "logits", "firsttoken"])
def test_a_checks_rows_are_the_bf16_paths_rows(fp8_with_tokenizer, check):
    from glmcheck import evaluate

    calls = {"layer0": lambda o: evaluate.layer0(o, tokens=32), "logits": lambda o: evaluate.logits(o, tokens=[32]),
             "firsttoken": lambda o: evaluate.firsttoken(o, prompts="natural50", limit=2)}
    reports = {}
    for weights in ("fp8", "bf16"):
        kernel = "triton_sparse_mla" if check == "layer0" else "reference:bf16"  # the interpreter is slow
        options = evaluate.CheckOptions(checkpoint=str(fp8_with_tokenizer), weights=weights, quiet=True, band=3,
                                        backends=[kernel])
        reports[weights] = calls[check](options)
    fp8, bf16 = reports["fp8"], reports["bf16"]
    assert fp8.model["weights"] == "fp8" and bf16.model["weights"] == "bf16"
    assert fp8.rows == bf16.rows and fp8.extra == bf16.extra and fp8.verdict == bf16.verdict


@pytest.fixture(scope="module")
def broken_fp8(tmp_path_factory):
    from tests.support.checkpoints import KV_B0, KV_B2, rewrite

    base = tmp_path_factory.mktemp("broken-fp8")
    return {"nan-scale0": rewrite(FP8, base / "nan-scale0", KV_B0 + "_scale_inv", "nan"),
            "nan-scale2": rewrite(FP8, base / "nan-scale2", KV_B2 + "_scale_inv", "nan"),
            "codes-bf16": rewrite(FP8, base / "codes-bf16", KV_B0, "bf16"),
            "scale-shape": rewrite(FP8, base / "scale-shape", KV_B2 + "_scale_inv", "halve"),
            "scale-missing": rewrite(FP8, base / "scale-missing", KV_B0 + "_scale_inv", "drop")}


KV0, KV2 = "model.layers.0.self_attn.kv_b_proj.weight", "model.layers.2.self_attn.kv_b_proj.weight"
BAD_FP8 = [  # (checkpoint, command, the one line's words); each under --weights fp8 and bf16
    ("nan-scale0", "layer0", (f"tensor {KV0}_scale_inv in model-00002-of-00004.safetensors holds 4 NaN/Inf block "
                              f"scales of 4")),
    ("nan-scale2", "logits", f"tensor {KV2}_scale_inv in model-0000"),
    ("codes-bf16", "layer0", (f"tensor {KV0} in model-00002-of-00004.safetensors is BF16 beside its {KV0}_scale_inv; "
                              f"block-FP8 codes must be F8_E4M3 (e4m3fn)")),
    ("scale-shape", "layer0", f"tensor {KV2}_scale_inv is [2, 1]"),
    ("scale-missing", "logits", f"lacks tensor {KV0}_scale_inv"),
]


@pytest.mark.parametrize("weights", ["fp8", "bf16"])
@pytest.mark.parametrize("name, command, words", BAD_FP8, ids=[c[0] for c in BAD_FP8])
def test_a_bad_fp8_checkpoint_is_one_line_and_exit_2(broken_fp8, tmp_path, capsys, weights, name, command, words):
    from glmcheck import cli

    out = tmp_path / "out"
    code = cli.main([command, "--checkpoint", str(broken_fp8[name]), "--weights", weights, "--tokens", "16",
                     "--backends", "reference:bf16", "--band", "1", "--quiet", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert words in err, err
    assert not out.exists()


@pytest.mark.parametrize("model", [["--checkpoint", str(FP8.parent / "tiny-bf16")], ["--model", "ref-cpu"]])
def test_fp8_weights_of_a_bf16_checkpoint_are_refused(tmp_path, capsys, model):
    from glmcheck import cli

    code = cli.main(["layer0", *model, "--weights", "fp8", "--quiet", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "holds bf16 weights (no fp8 quantization_config)" in err, err


def test_auto_holds_an_fp8_checkpoint_resident_only_where_bf16_would_not_fit(monkeypatch):
    """--weights auto: bf16 on a device whose 90 % holds the bf16 model and a prompt's activations, fp8 otherwise."""
    from glmcheck import evaluate
    from glmcheck.evaluate.setup import Setup
    from glmcheck.model import memory

    config = load_checkpoint_model(FP8).config
    need = {w: rank_weights(config, 1, w).held + rank_weights(config, 1, w).transient()
            + memory.activation_bytes(config, 1, 32) for w in ("bf16", "fp8")}
    for device_bytes, expected in ((need["bf16"] / memory.HEADROOM + 1, "bf16"), (need["bf16"] / memory.HEADROOM - 1,
                                                                               "fp8")):
        monkeypatch.setattr(memory, "device_bytes", lambda device, size=device_bytes: int(size))
        setup = Setup(evaluate.CheckOptions(checkpoint=str(FP8), quiet=True, backends=["reference:bf16"]),
                      one_prompt=True, tokens=32)
        assert setup.spec.weights == expected and setup.describe()["weights"] == "auto"


ABSORBED = "absorbed (every swapped backend)"


def test_plan_holds_glm52_at_tp8_in_fp8_with_room_for_8192_tokens(capsys):
    """`glmcheck plan --model glm-5.2 --tp 8 --weights fp8 --tokens 8192` fits (about 92 GiB of weights a rank); the
    bf16 plan is as before (179.0 GiB a rank, 51 of 78 layers at 8192 tokens)."""
    from glmcheck import cli
    from glmcheck.model.memory import plan_memory

    assert cli.main(["plan", "--model", "glm-5.2", "--tp", "8", "--weights", "fp8", "--tokens", "8192"]) == 0
    printed = capsys.readouterr().out
    absorbed = {term: cells[ABSORBED] for term, cells in plan_cells(printed).items()}
    # a dummy build's transient expert stack, 256 x 4096 x 6144 fp32 (docs/multigpu.md, "Rank rehearsal")
    assert "that stack's fp32 values (24.0 GiB" in " ".join(printed.split())
    assert absorbed["weights / rank"] == "92.0 GiB" and absorbed["fits 141 GiB"] == "yes", absorbed
    fp8 = plan_memory(make_config("glm-5.2"), 8, 8192, weights="fp8")
    assert fp8.fits and fp8.max_layers == 78 and fp8.max_tokens > 16384
    assert 90 < fp8.weights_gib_per_rank < 95 and fp8.codes_gib > 80 and fp8.scales_gib < 0.1
    assert 1 < fp8.transient_gib < 4 and fp8.dense_gib < 6
    assert cli.main(["plan", "--model", "glm-5.2", "--tp", "8", "--tokens", "8192"]) == 1
    absorbed = {term: cells[ABSORBED] for term, cells in plan_cells(capsys.readouterr().out).items()}
    assert (absorbed["weights / rank"], absorbed["fits 141 GiB"], absorbed["max layers that fit"]) == (
        "179.0 GiB", "no", "51"), absorbed


def test_to_bf16_gives_the_bf16_load():
    from glmcheck.model.fp8_resident import to_bf16

    twin = to_bf16(load_resident_checkpoint(FP8))
    loaded = load_checkpoint_model(FP8).state_dict()
    assert not resident_tensors(twin) and twin.state_dict().keys() == loaded.keys()
    assert all(torch.equal(t, loaded[n]) for n, t in twin.state_dict().items())


def test_emulated_tp_reads_each_resident_o_proj_once_for_its_rank_sums():
    """In-process --tp N sums o_proj's rank partial products in a hook; under --weights fp8 each read of the resident
    weight dequantises the whole matrix, so the hook reads it once, not once per rank."""
    from glmcheck.model.swap import use_backend

    model = load_resident_checkpoint(FP8)
    calls: dict[str, int] = {}
    for name, step in resident_tensors(model).items():
        step.register_forward_hook(lambda m, a, o, name=name: calls.__setitem__(name, calls.get(name, 0) + 1))
    ids = torch.randint(0, 512, (1, 24), generator=torch.Generator().manual_seed(3))
    with torch.inference_mode(), use_backend(model, "reference", tp=4):
        model(ids)
    o_proj = {n: c for n, c in calls.items() if ".o_proj." in n}
    assert o_proj and set(o_proj.values()) == {2}, o_proj  # the module's own forward and the rank sums' one read
