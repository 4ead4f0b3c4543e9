"""The per-token path on the ping-pong tile without the compaction pass (RAW_ROWS, reached through
`sparse_mla_prefill(..., _raw_token_rows=True)` until it is measured): the launcher and the dispatch on the CPU
(kernel objects stubbed), and on an sm_90 GPU the tile against fp64 and, where no slot is empty, bit for bit
against the compacted path. Its barrier protocol is modelled in tests/test_pingpong_protocol.py."""

from __future__ import annotations

import pytest
import torch

from glmcheck.backends.reference import sparse_mla_reference
from glmcheck.data.indices import drifting_indices
from glmcheck.data.inputs import poisoned_out, random_qkv
from glmcheck.kernels import prefill, sparse_mla_prefill
from tests.support.checks import assert_close_to_reference


def _stub_kernel(monkeypatch) -> list[tuple[tuple, tuple, dict]]:
    from glmcheck.kernels.gluon import pingpong
    launches: list[tuple[tuple, tuple, dict]] = []

    class FakeKernel:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: launches.append((grid, args, kwargs))

    monkeypatch.setattr(pingpong, "sparse_mla_union_pingpong_kernel", FakeKernel())
    return launches


def test_raw_rows_launcher_hands_the_kernel_index_rows_and_clamped_lengths(monkeypatch):
    """Each token's index row goes to the tile as it is (a strided view made contiguous: the producer takes the
    row stride as the row width), topk_length clamped to [0, topk], the KV row count for the validity test, and
    RAW_ROWS on one-token groups in 64-head slices; without topk_length it is refused."""
    from glmcheck.kernels.gluon.launch import launch_token_rows_raw
    from glmcheck.kernels.validate import PrefillArgs
    launches = _stub_kernel(monkeypatch)
    q, kv = torch.zeros((5, 128, 576), dtype=torch.bfloat16), torch.zeros((40, 576), dtype=torch.bfloat16)
    wide = torch.randint(-1, 50, (5, 260), dtype=torch.int32)
    indices = wide[:, ::2]  # [5, 130], strided
    lengths = torch.tensor([-3, 0, 7, 130, 500], dtype=torch.int32)
    launch_token_rows_raw(PrefillArgs(q, kv, indices, lengths, 0.1, 512), torch.zeros((5, 128, 512)), 0.25, False)
    (grid, args, constants), = launches
    rows, bits, passed_lengths = args[2], args[3], args[4]
    assert grid == (10,) and constants["RAW_ROWS"] is True and constants["G"] == 1 and constants["HEAD_SLICES"] == 2
    assert rows.is_contiguous() and torch.equal(rows, indices) and bits.dtype == torch.uint8
    assert passed_lengths.tolist() == [0, 0, 7, 130, 130]
    assert args[-2:] == (128, 40), "num_heads, then the KV row count the producer tests rows against"
    with pytest.raises(ValueError, match="topk_length"):
        launch_token_rows_raw(PrefillArgs(q, kv, indices, None, 0.1, 512), torch.zeros((5, 128, 512)), 0.25, False)


@pytest.mark.parametrize("with_length, hook, expected", [
    (True, True, "raw"), (False, True, "compacted"), (True, False, "compacted")])
def test_raw_rows_only_when_asked_and_given_topk_length(monkeypatch, with_length, hook, expected):
    """`_raw_token_rows` takes the raw launcher on the ping-pong tile's per-token path when topk_length is given;
    without it (the compaction finds each token's bound) or without the hook the compacted rows go to the tile."""
    calls: list[str] = []
    monkeypatch.setattr(prefill, "ws_supports", lambda args, group: group == 1)
    monkeypatch.setattr(prefill, "launch_token_rows_raw", lambda *args: calls.append("raw"))
    monkeypatch.setattr(prefill, "launch_union_attention_ws", lambda args, sets, *rest: calls.append(
        "compacted" if sets.group == 1 else "union"))
    q, kv = torch.zeros((4, 64, 576), dtype=torch.bfloat16), torch.zeros((16, 576), dtype=torch.bfloat16)
    indices = torch.arange(8, dtype=torch.int32).repeat(4, 1)
    lengths = torch.full((4,), 8, dtype=torch.int32) if with_length else None
    sparse_mla_prefill(q, kv, indices, 0.1, 512, topk_length=lengths, _raw_token_rows=hook)
    assert calls == [expected]


def _raw_device() -> torch.device:
    from glmcheck.kernels.gluon.launch import ws_available
    device = torch.device("cuda")
    if not ws_available(device):
        pytest.skip("the ping-pong tile needs an sm_90 GPU and Gluon")
    return device


@pytest.mark.gpu
@pytest.mark.parametrize("heads, kv_int64, topk", [(64, False, 512), (128, False, 512), (17, False, 130),
                                                  (64, True, 130)])
def test_gpu_raw_rows_match_fp64_with_empty_slots_and_odd_lengths(heads, kv_int64, topk):
    """Empty slots inside topk_length (-1 and rows past the pool), lengths below 0, 0, odd block counts and past
    topk, index rows not a whole number of blocks (130) given as a strided view: the raw tile against fp64 on a
    poisoned output."""
    device = _raw_device()
    tokens, kv_rows = 300, 600
    gen = torch.Generator().manual_seed(heads)
    indices = torch.randperm(kv_rows, generator=gen)[:topk].repeat(tokens, 1).to(torch.int32)
    indices = torch.stack([row[torch.randperm(topk, generator=gen)] for row in indices])
    indices[:, ::7] = -1
    indices[:, 3::11] = kv_rows + 5
    lengths = torch.randint(-2, topk + 6, (tokens,), generator=gen, dtype=torch.int32)
    lengths[:4] = torch.tensor([0, 1, 65, 129], dtype=torch.int32)
    q, kv = random_qkv(tokens, heads, kv_rows, 512, 64, gen, device)
    wide = torch.stack([indices, indices], dim=2).reshape(tokens, 2 * topk).to(device)
    indices, lengths = wide[:, ::2], lengths.to(device)  # a strided view on the device
    out = poisoned_out(tokens, heads, 512, device)
    sparse_mla_prefill(q, kv, indices, 576 ** -0.5, 512, topk_length=lengths, out=out, _raw_token_rows=True,
                       _kv_int64=kv_int64)
    torch.cuda.synchronize()
    assert not out.isnan().any(), "the raw tile left outputs unwritten"
    assert_close_to_reference(out, sparse_mla_reference(q, kv, indices, 576 ** -0.5, 512, topk_length=lengths))


@pytest.mark.gpu
@pytest.mark.parametrize("heads", [64, 128])
def test_gpu_raw_rows_equal_the_compacted_path_where_no_slot_is_empty(heads):
    """With every slot below topk_length holding a row (causal prefixes, then a random walk) the raw tile sees the
    compacted path's rows in the same blocks: the same bits."""
    device = _raw_device()
    tokens, topk = 700, 512
    indices = drifting_indices([tokens], topk, 0.10, seed=heads).to(device)
    lengths = prefill.effective_lengths(indices, None, tokens)
    q, kv = random_qkv(tokens, heads, tokens, 512, 64, torch.Generator().manual_seed(heads), device)
    compacted = sparse_mla_prefill(q, kv, indices, 576 ** -0.5, 512, topk_length=lengths)
    raw = sparse_mla_prefill(q, kv, indices, 576 ** -0.5, 512, topk_length=lengths, _raw_token_rows=True)
    assert torch.equal(raw, compacted)
