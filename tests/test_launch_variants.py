"""Compiled variants that follow the prompt length (docs/performance.md, "Time to verdict"): a short prompt's top-k
is its length, so a launch size or a specialised int that follows top-k compiles a kernel variant per length class
(firsttoken compiled 54 on the H200 before). The per-token kernel's bound scan and the marks build launch one size
for every top-k, and the marks build is not specialised on the ints whose divisibility changes none of its code."""

from __future__ import annotations

import torch

from glmcheck.kernels import prefill, union, union_marks


class _Recorder:
    """Stands in for a JIT kernel: records each launch's constexpr keyword arguments, launches nothing."""

    def __init__(self):
        self.launches: list[dict] = []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches.append({k: v for k, v in kwargs.items() if k.isupper()})
        return launch


def _indices(tokens: int, topk: int) -> torch.Tensor:
    rows = torch.arange(topk, dtype=torch.int32).expand(tokens, topk).contiguous()
    return torch.where(rows <= torch.arange(tokens, dtype=torch.int32)[:, None], rows, -1)


def test_marks_build_launches_one_size_for_every_topk(monkeypatch):
    recorder = _Recorder()
    monkeypatch.setattr(union, "union_marks_kernel", recorder)
    for length in (2, 7, 16, 33, 89, 300, 1500, 2048):  # prompt lengths; groups of 2 want an even token count
        tokens = max(2, length - length % 2)
        union.build_union_sets(_indices(tokens, min(length, 2048)), 2, None, length, method="marks")
    assert len(recorder.launches) == 8 and {frozenset(k.items()) for k in recorder.launches} == \
        {frozenset(recorder.launches[0].items())}, recorder.launches


def test_per_token_bound_scan_launches_one_size_for_every_topk(monkeypatch, device):
    recorder = _Recorder()
    monkeypatch.setattr(prefill, "sparse_mla_token_kernel", recorder)
    for tokens in (3, 17, 90, 1500):  # on the kernels' device (CUDA on the GPU machine), though nothing launches
        q = torch.randn(tokens, 8, 576).to(device, torch.bfloat16)
        kv = torch.randn(tokens, 576).to(device, torch.bfloat16)
        prefill.sparse_mla_prefill(q, kv, _indices(tokens, min(tokens, 2048)).to(device), 0.05, 512)
    assert {k["END_BLOCK"] for k in recorder.launches} == {prefill.END_BLOCK}, recorder.launches


def test_marks_build_is_not_specialised_on_the_length_following_ints():
    """Their divisibility changes no instruction of the sm_90 code at top-k 2048
    (evidence/2026-12-04-marks-ptx/); topk, the index stride and num_kv_rows do (16-byte index
    loads) and stay specialised."""
    kernel = union_marks.union_marks_kernel  # a JITFunction on the GPU, an InterpretedFunction on the CPU
    names = getattr(kernel, "do_not_specialize", None) or getattr(kernel, "kwargs", {}).get("do_not_specialize")
    assert set(names) == {"num_groups", "width", "stride_rg", "stride_bg"}
