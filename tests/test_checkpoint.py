"""Real-weights path on the committed tiny checkpoints (bf16 and block-FP8), partial loading."""

from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path

import pytest
import torch

from glmcheck.checks import metrics
from glmcheck.checks.capture import capture
from glmcheck.model import build_dummy_model, checkpoint, checkpoint_files, make_config, use_backend
from glmcheck.model.checkpoint import load_checkpoint_model, load_layer0_model
from glmcheck.model.checkpoint_files import CheckpointError
from glmcheck.model.fp8_blocks import dequantize_blocks, quantize_blocks
from tests.support.checkpoints import BF16, EXPERT2, EXTRA, FP8, KV_B0, KV_B2, edit_config, rewrite


def layer0_value(model, prompt):
    with use_backend(model, "reference") as session, capture(model, session, value_layers=[0]) as got, \
            torch.no_grad():
        model(prompt)
    return got.value[0]


def test_bf16_checkpoint_is_the_seeded_tiny_model():
    loaded = load_checkpoint_model(BF16).state_dict()
    built = build_dummy_model(make_config("tiny"), seed=0, init="sharp").state_dict()
    assert loaded.keys() == built.keys()
    differing = [k for k in built if not torch.equal(loaded[k], built[k])]
    assert not differing, f"{len(differing)} tensors differ, first: {differing[:4]}"


def test_routers_cast_down_by_from_pretrained_are_reread_in_fp32():
    # transformers 5.17 (the GPU image) loads the fp32-stored routers into bf16 parameters (GPU run 6);
    # emulate that here and check restore_fp32 brings back the stored fp32 values bitwise.
    from glmcheck.model.checkpoint import restore_fp32

    model = load_checkpoint_model(BF16)
    stored = {n: p.detach().clone() for n, p in model.named_parameters() if n.endswith("mlp.gate.weight")}
    assert stored and all(t.dtype == torch.float32 for t in stored.values())
    for name, param in model.named_parameters():
        if name in stored:
            param.data = param.data.to(torch.bfloat16)
    restore_fp32(model, BF16)
    params = dict(model.named_parameters())
    assert all(params[n].dtype == torch.float32 and torch.equal(params[n], t) for n, t in stored.items())


def test_fp8_checkpoint_is_dequantised_to_bf16():
    fp8 = load_checkpoint_model(FP8).state_dict()
    bf16 = load_checkpoint_model(BF16).state_dict()
    for name in ("model.layers.0.self_attn.kv_b_proj.weight", "model.layers.1.mlp.experts.gate_up_proj"):
        assert fp8[name].dtype == torch.bfloat16
        assert 1e-3 < metrics.rel_l2(fp8[name], bf16[name]) < 0.06, name
    assert torch.equal(fp8["model.embed_tokens.weight"], bf16["model.embed_tokens.weight"])


def test_block_quantisation_roundtrip():
    weight = torch.randn(200, 300) * torch.linspace(0.01, 10, 300)
    q, scale = quantize_blocks(weight)
    assert q.dtype == torch.float8_e4m3fn and scale.shape == (2, 3)
    assert metrics.rel_l2(dequantize_blocks(q, scale), weight) < 0.05


@pytest.mark.parametrize("source", [BF16, FP8], ids=["bf16", "fp8"])
def test_layer0_partial_loading_reads_only_what_it_needs(monkeypatch, source):
    read: list[str] = []
    data_files: set[str] = set()
    header_files: set[str] = set()
    real_open = checkpoint_files.open_safetensors

    class Spy:
        def __init__(self, handle, file):
            self.handle, self.file = handle, file

        def __enter__(self):
            self.inner = self.handle.__enter__()
            return self

        def __exit__(self, *exc):
            return self.handle.__exit__(*exc)

        def keys(self):
            return self.inner.keys()

        def get_slice(self, name):  # metadata (shape, dtype) only: check_tensors
            header_files.add(self.file)
            return self.inner.get_slice(name)

        def get_tensor(self, name):
            read.append(name)
            data_files.add(self.file)
            return self.inner.get_tensor(name)

    def spy_open(file):
        return Spy(real_open(file), Path(file).name)

    for module in (checkpoint, checkpoint_files):  # the loader opens data files, the checks and scales their own
        monkeypatch.setattr(module, "open_safetensors", spy_open)
    model = load_layer0_model(source)
    assert model.config.num_hidden_layers == 1 and model.glmcheck_unloaded == ["lm_head.weight", "model.norm.weight"]
    assert read and all(n.startswith(checkpoint.LAYER0_PREFIXES) for n in read)
    index = json.loads((source / "model.safetensors.index.json").read_text())["weight_map"]
    needed_files = {index[n] for n in read}
    assert data_files == needed_files and len(needed_files) < len(set(index.values()))
    assert header_files == set(index.values())  # every tensor's shape is checked against the config
    for module in (checkpoint, checkpoint_files):
        monkeypatch.setattr(module, "open_safetensors", real_open)
    prompt = torch.randint(0, 512, (1, 40), generator=torch.Generator().manual_seed(2))
    full = load_checkpoint_model(source)
    assert torch.equal(layer0_value(model, prompt), layer0_value(full, prompt))


def _copy(tmp_path: Path, source: Path) -> Path:
    target = tmp_path / source.name
    shutil.copytree(source, target)
    return target


def test_bad_checkpoints(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_checkpoint_model(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"has no config\.json"):
        load_layer0_model(tmp_path / "empty")
    missing = _copy(tmp_path, BF16)
    next(missing.glob("model-00002-*.safetensors")).unlink()
    with pytest.raises(FileNotFoundError, match="missing weight files"):
        load_checkpoint_model(missing)
    corrupt = _copy(tmp_path / "corrupt", BF16)
    shard = min(corrupt.glob("model-*.safetensors"))
    shard.write_bytes(shard.read_bytes()[:100])
    with pytest.raises(CheckpointError, match=r"not a readable safetensors file|could not be loaded"):
        load_layer0_model(corrupt)
    with pytest.raises(CheckpointError):
        load_checkpoint_model(corrupt)
    other = _copy(tmp_path / "other", BF16)
    config = json.loads((other / "config.json").read_text())
    config["model_type"] = "llama"
    (other / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="expected glm_moe_dsa"):
        load_layer0_model(other)


def _loaders():
    from glmcheck.model.checkpoint_shard import load_checkpoint_shard

    return {
        "whole": load_checkpoint_model,
        "layer0": load_layer0_model,
        "shard": lambda path: load_checkpoint_shard(path, rank=1, world=2),
        "shard-layer0": lambda path: load_checkpoint_shard(path, rank=0, world=2, layer0_only=True),
    }


LOADERS = ["whole", "layer0", "shard", "shard-layer0"]
BAD_TENSORS = [  # (fixture, tensor, change, the message after "checkpoint '<path>': ")
    (BF16, KV_B0, "halve", (rf"tensor {KV_B0} is \[256, 64\] in model-00002-of-00004.safetensors, but config.json "
                            rf"implies \[512, 64\]$")),
    (BF16, KV_B2, "halve", (rf"tensor {KV_B2} is \[256, 64\] in model-00004-of-00004.safetensors, but config.json "
                            rf"implies \[512, 64\]$")),
    (BF16, KV_B0, "drop", (rf"lacks tensor {KV_B0} \(config.json implies \[512, 64\]; "
                           rf"model.safetensors.index.json does not list it\)$")),
    (BF16, EXPERT2, "drop-file", (rf"lacks tensor {EXPERT2} \(config.json implies \[256, 64\]; "
                                  rf"model.safetensors.index.json maps it to model-0000\d-of-00004.safetensors, which "
                                  rf"does not hold it\)$")),
    (FP8, KV_B0, "halve", (rf"tensor {KV_B0} is \[256, 64\] in model-00002-of-00004.safetensors, but config.json "
                           rf"implies \[512, 64\]$")),
    (FP8, KV_B2 + "_scale_inv", "halve", (rf"tensor {KV_B2}_scale_inv is \[2, 1\] in "
                                          rf"model-0000\d-of-00004.safetensors, but a \[512, 64\] FP8 weight in "
                                          rf"128x128 blocks needs \[4, 1\]$")),
    (FP8, KV_B0 + "_scale_inv", "drop", (rf"lacks tensor {KV_B0}_scale_inv \(a \[512, 64\] FP8 weight in 128x128 "
                                         rf"blocks needs \[4, 1\]; {KV_B0} is F8_E4M3\)$")),
]


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("source, name, change, words", BAD_TENSORS,
                         ids=[f"{s.name}-{c}-{n.split('.')[2]}-{n.rsplit('.', 1)[-1]}" for s, n, c, _ in BAD_TENSORS])
def test_tensors_that_disagree_with_the_config_are_named_with_both_shapes(tmp_path, monkeypatch, loader, source,
                                                                          name, change, words):
    """Every loader refuses, from the metadata alone and before building anything, a checkpoint whose
    tensor is missing or of another shape than config.json implies (a later layer too, for the
    layer-0 loaders), and an FP8 weight whose 128x128 block scale is missing or of the wrong shape."""
    broken = rewrite(source, tmp_path / "broken", name, change)

    def no_build(*args, **kwargs):
        raise AssertionError("a model was built before the checkpoint was checked")

    import glmcheck.model.checkpoint_shard as shard_module
    monkeypatch.setattr(checkpoint, "build_dummy_model", no_build)
    monkeypatch.setattr(shard_module, "build_shard", no_build)
    monkeypatch.setattr(checkpoint.GlmMoeDsaForCausalLM, "from_pretrained", no_build)
    with pytest.raises(CheckpointError) as caught:
        _loaders()[loader](broken)
    message = str(caught.value)
    assert "\n" not in message
    assert re.fullmatch(rf"checkpoint '{re.escape(str(broken))}': {words}", message), message


def test_fp8_tensors_without_an_fp8_config_are_refused(tmp_path):
    """from_pretrained would cast the e4m3 values to bf16 and drop their scales: silently wrong."""
    broken = edit_config(_copy(tmp_path, FP8), quantization_config=None)
    for load in _loaders().values():
        with pytest.raises(CheckpointError, match=r"tensor model\.layers\.0\.\S+ in model-\S+ is FP8 \(F8_E4M3\), but "
                                                  r"config.json has no fp8 quantization_config"):
            load(broken)


def test_every_problem_is_counted_and_the_first_named(tmp_path):
    broken = rewrite(BF16, tmp_path / "one", KV_B0, "halve")
    twice = rewrite(broken, tmp_path / "two", KV_B2, "halve")
    with pytest.raises(CheckpointError, match=rf"tensor {KV_B0} is \[256, 64\] .*implies \[512, 64\] "
                                              rf"\(1 more tensors disagree\)$"):
        checkpoint_files.check_tensors(twice)


@pytest.mark.parametrize("source", [BF16, FP8], ids=["bf16", "fp8"])
def test_unused_tensors_are_one_warning_and_the_run_goes_on(tmp_path, caplog, source):
    extra = rewrite(source, tmp_path / "extra", EXTRA, "add")
    with caplog.at_level(logging.WARNING, logger="glmcheck"):
        assert checkpoint_files.check_tensors(extra) == [EXTRA]
        whole = load_checkpoint_model(extra)
        layer0 = load_layer0_model(extra)
    lines = [r.getMessage() for r in caplog.records if r.name == "glmcheck"]
    assert lines and all(line == lines[0] for line in lines) and "\n" not in lines[0], lines
    assert f"has 1 tensor the model of its config.json does not use (ignored): {EXTRA}" in lines[0]
    assert EXTRA not in whole.state_dict() and EXTRA not in layer0.state_dict()
    reference = load_checkpoint_model(source).state_dict()
    assert all(torch.equal(t, reference[n]) for n, t in whole.state_dict().items())


def test_declared_next_token_prediction_layers_are_ignored_silently(tmp_path, caplog):
    """GLM ships its MTP layer as model.layers.<num_hidden_layers>.* (num_nextn_predict_layers: 1);
    transformers ignores it, so does the check. Undeclared, the same tensor is a warning."""
    mtp = rewrite(BF16, tmp_path / "mtp", "model.layers.3.eh_proj.weight", "add")
    with caplog.at_level(logging.WARNING, logger="glmcheck"):
        assert checkpoint_files.check_tensors(mtp) == ["model.layers.3.eh_proj.weight"]
        edit_config(mtp, num_nextn_predict_layers=1)
        caplog.clear()
        assert checkpoint_files.check_tensors(mtp) == []
        assert not caplog.records


def test_the_fixtures_agree_with_their_configs(caplog):
    with caplog.at_level(logging.WARNING, logger="glmcheck"):
        assert checkpoint_files.check_tensors(BF16) == [] and checkpoint_files.check_tensors(FP8) == []
    assert not caplog.records


def test_file_shapes_are_the_stored_layout():
    """file_shapes names the files' tensors (routed experts per expert), with the config's shapes."""
    config = checkpoint_files.read_config(BF16)
    index = json.loads((BF16 / "model.safetensors.index.json").read_text())["weight_map"]
    assert set(checkpoint_files.file_shapes(config)) == set(index)
    assert checkpoint_files.file_shapes(config)[EXPERT2] == (256, 64)
    assert checkpoint_files.scale_shape((512, 64), (128, 128)) == (4, 1)
    assert checkpoint_files.scale_shape((129, 257), (128, 128)) == (2, 3)


def test_transformers_loading_info_is_a_second_line_of_defence():
    """Behind check_tensors: what transformers reports missing or mismatched is still an error."""
    with pytest.raises(CheckpointError, match=r"missing keys \(1\): model\.layers\.0\.self_attn\.kv_b_proj\.weight"):
        checkpoint.check_loading_info("ckpt", {"missing_keys": {KV_B0}, "mismatched_keys": [], "unexpected_keys": []})
    with pytest.raises(CheckpointError, match="mismatched keys"):
        checkpoint.check_loading_info("ckpt", {"missing_keys": [], "mismatched_keys": [(KV_B0, (1,), (2,))]})
    checkpoint.check_loading_info("ckpt", {"missing_keys": [], "unexpected_keys": ["x"]})


@pytest.mark.parametrize("fixture", [BF16, FP8], ids=["bf16", "fp8"])
def test_rank_shards_are_slices_of_the_whole_checkpoint(fixture):
    from glmcheck.model.checkpoint_shard import load_checkpoint_shard
    from glmcheck.model.sharding import slicer

    whole = load_checkpoint_model(fixture).state_dict()
    for rank in (0, 1):
        shard = load_checkpoint_shard(fixture, rank=rank, world=2).state_dict()
        assert shard.keys() == whole.keys()
        for name, tensor in shard.items():
            cut = slicer(name, rank, 2)
            expected = cut(whole[name]) if cut else whole[name]
            assert torch.equal(expected.to(tensor.dtype), tensor), f"rank {rank}: {name}"
    fused = [n for n in whole if n.endswith("experts.gate_up_proj")]
    assert fused, "the fixture must exercise the per-expert -> fused assembly"


def test_shard_loader_names_a_missing_expert_tensor(tmp_path):
    from glmcheck.model.checkpoint_shard import load_checkpoint_shard

    broken = tmp_path / "tiny-bf16"
    shutil.copytree(BF16, broken)
    index_path = broken / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    del index["weight_map"]["model.layers.1.mlp.experts.1.up_proj.weight"]
    index_path.write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=r"lacks tensor model\.layers\.1\.mlp\.experts\.1\.up_proj\.weight"):
        load_checkpoint_shard(broken, rank=1, world=2)
