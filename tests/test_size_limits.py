"""Sizes that cannot be allocated, or would run for hours, are refused before anything is built,
naming the limit (library level; the CLI cases are in tests/test_bad_input_matrix.py)."""

from __future__ import annotations

import os

import pytest
import torch

from glmcheck.checks import kernel_check as selfcheck
from glmcheck.checks.kernel_check import CPU_DEFAULT, GPU_DEFAULT, KernelShape
from glmcheck.evaluate import arguments as options
from glmcheck.model import memory
from glmcheck.process.wording import cli_wording

GIB = 2**30


def shape(**changes) -> KernelShape:
    return KernelShape(**{**CPU_DEFAULT.__dict__, **changes})


def fake_memory(monkeypatch, ram_gib: float, gpu_free_gib: float = 0, gpu_total_gib: float = 80):
    sysconf = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": int(ram_gib * GIB) // 4096}
    monkeypatch.setattr(os, "sysconf", lambda name: sysconf[name])
    monkeypatch.setattr(torch.cuda, "mem_get_info",
                        lambda device=None: (int(gpu_free_gib * GIB), int(gpu_total_gib * GIB)))


def test_device_memory_is_ram_on_the_cpu_and_free_memory_on_a_gpu(monkeypatch):
    fake_memory(monkeypatch, ram_gib=16, gpu_free_gib=70, gpu_total_gib=80)
    assert memory.device_memory("cpu") == (16 * GIB, "of RAM")
    assert memory.device_memory(torch.device("cuda", 0)) == (70 * GIB, "free on cuda:0 (of 80.0 GiB)")
    with pytest.raises(ValueError, match=r"^thing needs about 20.0 GiB \(why\), more than the 16.0 GiB of RAM$"):
        memory.check_memory(20 * GIB, "cpu", "thing", "why")
    memory.check_memory(16 * GIB, "cpu", "thing")
    assert [memory.gib(x) for x in (GIB / 4, 3.14 * GIB, 30518 * GIB)] == ["0.25 GiB", "3.1 GiB", "30,518 GiB"]


def test_selfcheck_memory_is_estimated_from_the_shapes():
    host, device = selfcheck.memory_bytes(shape(kv_rows=100_000_000))
    assert host > 100_000_000 * 80 * 6  # the KV pool drawn in fp32 then cast, and a [T, S] sort key per token
    assert host + device > 100 * GIB
    small_host, small_device = selfcheck.memory_bytes(CPU_DEFAULT)
    assert small_host + small_device < GIB
    # a prefill pool (S == T) draws its indices by the drifting generator: no [T, S] key
    assert selfcheck.memory_bytes(shape(kv_rows=64))[0] < small_host


def test_selfcheck_refuses_what_the_ram_cannot_hold(monkeypatch):
    fake_memory(monkeypatch, ram_gib=64)
    with cli_wording(), pytest.raises(ValueError, match=r"^--tokens 64 --heads 8 --kv-rows 100000000 --topk 128 "
                                                        r"\(d_qk 80\) needs about 13\d GiB \(inputs, references, "
                                                        r"outputs\), more than the 64.0 GiB of RAM$"):
        selfcheck.check_shape(shape(kv_rows=100_000_000), "cpu")
    selfcheck.check_shape(CPU_DEFAULT, "cpu")


def test_selfcheck_on_a_gpu_is_held_against_its_free_memory_and_the_host_ram(monkeypatch):
    fake_memory(monkeypatch, ram_gib=256, gpu_free_gib=10, gpu_total_gib=80)
    cuda = torch.device("cuda", 0)
    selfcheck.check_shape(GPU_DEFAULT, cuda)  # ~1.3 GiB on the device
    big = KernelShape(**{**GPU_DEFAULT.__dict__, "tokens": 1_000_000, "kv_rows": 1_000_000})
    with cli_wording(), pytest.raises(ValueError, match=r"--tokens 1000000 .* needs about [\d,.]+ GiB \(inputs, "
                                                        r"references, outputs on the GPU\), more than the 10.0 GiB "
                                                        r"free on cuda:0 \(of 80.0 GiB\)$"):
        selfcheck.check_shape(big, cuda)
    fake_memory(monkeypatch, ram_gib=8, gpu_free_gib=1000)
    with pytest.raises(ValueError, match=r"inputs drawn on the host\), more than the 8.0 GiB of RAM$"):
        selfcheck.check_shape(big, cuda)
    selfcheck.check_shape(KernelShape(**{**GPU_DEFAULT.__dict__, "tokens": 100_000, "kv_rows": 100_000}), cuda)


def test_selfcheck_cpu_time_limit():
    """The interpreter's speed model: within 2x of what was measured (2-core CPU), and refuses
    shapes estimated beyond CPU_LIMIT_S whatever the memory."""
    assert selfcheck.cpu_seconds(CPU_DEFAULT) < 30  # measured 9 s
    glm = KernelShape(tokens=16, heads=128, kv_rows=4096, topk=2048, d_v=512, d_tail=64)
    assert 170 / 2 < selfcheck.cpu_seconds(glm) < 170 * 2  # measured 170 s
    selfcheck.check_shape(shape(tokens=2000), "cpu")  # estimated 3.5 minutes
    with cli_wording(), pytest.raises(ValueError, match=r"^--tokens 1000000 --heads 8 --kv-rows 256 --topk 128 "
                                                        r"\(d_qk 80\) would take about 29.5 hours on the CPU .*the "
                                                        r"CPU limit is 10 minutes"):
        selfcheck.check_shape(shape(tokens=1_000_000), "cpu")
    with pytest.raises(ValueError, match=r"would take about 12 minutes on the CPU"):
        selfcheck.check_shape(KernelShape(tokens=64, heads=128, kv_rows=4096, topk=2048, d_v=512, d_tail=64), "cpu")


@pytest.mark.parametrize("changes, words", [
    ({"heads": 129}, "--heads 129: the kernel takes 1..128 heads"),
    ({"d_v": 48}, "--d-v 48: d_v must be a power of two >= 16"),
    ({"d_v": 8}, "--d-v 8: d_v must be a power of two >= 16"),
    ({"d_tail": 12}, "--d-tail 12: the rope tail must be 0 or a power of two"),
    ({"d_tail": -16}, "--d-tail -16: the rope tail must be 0 or a power of two"),
    ({"topk": 300}, "--topk 300 exceeds --kv-rows 256"),
])
def test_selfcheck_shapes_the_kernel_cannot_take(changes, words):
    with cli_wording(), pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        selfcheck.check_shape(shape(**changes), "cpu")
    library = words.replace("--kv-rows", "kv_rows").replace("--d-v", "d_v").replace("--d-tail", "d_tail")
    with pytest.raises(ValueError, match="^" + library.replace("--", "").replace("(", r"\(").replace(")", r"\)")):
        selfcheck.check_shape(shape(**changes), "cpu")  # a library caller reads the arguments' names


def test_run_kernel_check_refuses_before_allocating(monkeypatch):
    def no_inputs(*args, **kwargs):
        raise AssertionError("inputs were drawn before the shape was checked")

    monkeypatch.setattr(selfcheck, "random_qkv", no_inputs)
    with pytest.raises(ValueError, match="the CPU limit is 10 minutes"):
        selfcheck.run_kernel_check(shape(tokens=1_000_000), torch.device("cpu"))
    selfcheck.check_shape(shape(d_tail=0), "cpu")  # no rope tail is legal


def test_depth_experts_band_and_forward_limits():
    options.check_layers(None)
    options.check_layers(options.MAX_LAYERS)
    with pytest.raises(ValueError, match=r"^layers 313: at most 312 layers \(4 x the 78 of GLM-5.x"):
        options.check_layers(313)
    with pytest.raises(ValueError, match=r"layers must be an int >= 1"):
        options.check_layers(0)
    options.check_experts(1024)
    with pytest.raises(ValueError, match=r"^experts 1025: at most 1024 routed experts \(4 x the 256 of GLM-5.x"):
        options.check_experts(1025)
    options.check_band(16)
    with pytest.raises(ValueError, match=r"^band 17: at most 16 variants \(the band family has 16 flash-style"):
        options.check_band(17)
    options.check_band(14, held_out=2)
    with pytest.raises(ValueError, match=r"^band 15: at most 14 variants .*holds 2 of them out of the band\)$"):
        options.check_band(15, held_out=2)
    options.check_forwards(options.MAX_FORWARDS, "x")
    with pytest.raises(ValueError, match=r"^3 seeds: 100,001 model forwards, more than the limit of 100,000 "):
        options.check_forwards(100_001, "3 seeds")
    from glmcheck.process.wording import cli_wording

    with cli_wording(), pytest.raises(ValueError, match=r"^--layers 313: at most 312 layers"):
        options.check_layers(313)  # the command line names the flag


def test_the_depth_limit_keeps_the_meta_skeleton_quick():
    """What the limit protects: every memory estimate lays the model out on the meta device."""
    import time

    from glmcheck.model.presets import make_config
    from glmcheck.model.sharding import full_shapes

    start = time.perf_counter()
    full_shapes(make_config("glm-5.2", layers=options.MAX_LAYERS))
    assert time.perf_counter() - start < 10  # 0.6 s on the 2-core CI machine; 10,000 layers take 15 s
