"""The band over an FP8 KV cache (issue 57 item 3; glmcheck.backends.band_kernels.fp8_band_variant): its FP8 members
read the pool as an FP8 kernel does (each tile's dot with the e4m3 codes, the scale after it), which equals the
tile-summed dot over the dequantised rows bit for bit; every member within its bound of the fp64 reference in both
forms; chosen for band:K when the run's KV cache is FP8."""

from __future__ import annotations

import pytest
import torch

from glmcheck.backends.band_kernels import BAND_FAMILY, fp8_band_variant
from glmcheck.backends.forms import BAND_ENV
from glmcheck.backends.reference import band_variant, sparse_mla_reference
from glmcheck.backends.registry import get_backend
from glmcheck.checks import metrics
from glmcheck.data.inputs import random_distinct_indices
from glmcheck.kernels.fp8 import TILE, dequantize_kv_pool, quantize_kv_pool

U = 2.0 ** -8


def _fp8_inputs(device, d_v: int = 256, d_rope: int = 64, seed: int = 3):
    """24 tokens x 8 heads, top-k 160 of 300 rows already on the FP8 grid (two latent tiles), ragged lengths."""
    g = torch.Generator().manual_seed(seed)
    raw = torch.randn(300, d_v + d_rope, generator=g).bfloat16()
    kv = dequantize_kv_pool(quantize_kv_pool(raw, d_rope=d_rope), 300, d_rope=d_rope)
    q = (torch.randn(24, 8, d_v + d_rope, generator=g) * 0.15).bfloat16()
    indices = random_distinct_indices(24, 160, 300, g, empty_fraction=0.1)
    length = torch.randint(0, 161, (24,), generator=g, dtype=torch.int32)
    return q.to(device), kv.to(device), indices.to(device), d_v, length.to(device)


def test_scale_after_each_tiles_dot_is_the_dot_over_dequantised_rows():
    """An FP8 kernel's score: sum over tiles of scale_t x (q_t . codes_t). Scales are powers of two, so each tile's
    term equals q_t . (codes_t x scale_t), the dequantised row's tile, bit for bit in fp32."""
    g = torch.Generator().manual_seed(0)
    raw = (torch.randn(64, 576, generator=g) * torch.logspace(-3, 2, 64)[:, None]).bfloat16()
    pool = quantize_kv_pool(raw)
    rows = dequantize_kv_pool(pool, 64).float()
    flat = pool.reshape(64, -1)
    codes = flat[:, :512].contiguous().view(torch.float8_e4m3fn).float()
    scales = flat[:, 512:528].contiguous().view(torch.float32)
    assert bool((scales.log2() == scales.log2().round()).all()), "power-of-two scales"
    q = torch.randn(8, 512, generator=g).bfloat16().float()
    for t in range(512 // TILE):
        cols = slice(t * TILE, (t + 1) * TILE)
        native = (q[:, cols] @ codes[:, cols].T) * scales[:, t]
        assert torch.equal(native, q[:, cols] @ rows[:, cols].T), t


@pytest.mark.parametrize("impl", ["torch", "triton"])
def test_every_member_within_its_bound_and_the_fp8_ones_beside_their_bf16_twins(device, monkeypatch, impl):
    """Bound as the band's (3 u max|v| per element); an FP8 member k (odd) nearer band:k (the same kernel, only its
    score sums grouped per tile) than the nearest other member; an even member is band:k itself."""
    monkeypatch.setenv(BAND_ENV, impl)
    q, kv, indices, d_v, length = _fp8_inputs(device)
    exact = sparse_mla_reference(q, kv, indices, 0.3, d_v, topk_length=length)
    valid = (indices >= 0) & (torch.arange(indices.shape[1], device=indices.device)[None, :] < length[:, None])
    values = kv[torch.where(valid, indices, 0).long()][..., :d_v].double().abs() * valid[..., None]
    bound = 3 * U * values.amax(dim=1)[:, None, :] + 1e-6
    members = {k: fp8_band_variant(k)(q, kv, indices, 0.3, d_v, topk_length=length) for k in range(4)}
    twins = {k: band_variant(k)(q, kv, indices, 0.3, d_v, topk_length=length) for k in range(4)}
    for k, out in members.items():
        assert bool(((out.double() - exact).abs() <= bound).all()), k
        if k % 2 == 0:
            assert torch.equal(out, twins[k]), k
        else:
            nearest = min(metrics.rel_l2(twins[j], twins[k]) for j in range(4) if j != k)
            assert metrics.rel_l2(out, twins[k]) < 0.25 * nearest, (k, BAND_FAMILY[k])


def test_band_names_over_an_fp8_cache(monkeypatch):
    assert "FP8" in get_backend("band:1", kv_cache_dtype="fp8_e4m3").description
    assert "FP8" not in get_backend("band:1").description
    q, kv, indices, d_v, length = _fp8_inputs("cpu")
    monkeypatch.setenv(BAND_ENV, "torch")
    ours = get_backend("band:3", kv_cache_dtype="fp8_e4m3").fn(q, kv, indices, 0.3, d_v, topk_length=length)
    assert torch.equal(ours, fp8_band_variant(3)(q, kv, indices, 0.3, d_v, topk_length=length))
    with pytest.raises(ValueError, match=r"\[0, 15\]"):
        fp8_band_variant(16)


def test_the_fp8_form_sums_per_tile():
    """The torch form's tile-summed scores are the per-tile dots added in order, and not the one long dot (their fp32
    sums differ in the last bits on some of 20k products). How far that moves a kernel's output is the FP8 members'
    distance from their twins above: fp32 rounding, far inside the band (docs/reliability.md, "The FP8 KV cache")."""
    from glmcheck.backends.band_kernels import _scores

    g = torch.Generator().manual_seed(1)
    q = torch.randn(40, 8, 320, generator=g).bfloat16().float()
    rows = torch.randn(40, 64, 320, generator=g).bfloat16().float()
    tiled = _scores(q, rows, 256, 128)
    parts = [torch.einsum("chd,cbd->chb", q[..., a:b], rows[..., a:b]) for a, b in ((0, 128), (128, 256), (256, 320))]
    assert torch.equal(tiled, parts[0] + parts[1] + parts[2])
    assert not torch.equal(tiled, _scores(q, rows, 256, 0))


def test_the_rates_run_over_the_fp8_pool(monkeypatch, device):
    """`measure_rates(kv_cache_dtype="fp8_e4m3")` runs every forward over the FP8 pool (the measured FP8 rates of
    docs/reliability.md, "The FP8 KV cache"); without it none does."""
    from glmcheck.model import swap
    from glmcheck.selftest.rates import measure_rates

    calls: list[int] = []
    real = swap.quantize_kv_pool
    monkeypatch.setattr(swap, "quantize_kv_pool", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    tallies = measure_rates("tiny", [0], 16, ["layer0"], 3, device=device, kv_cache_dtype="fp8_e4m3")
    assert calls and {t.backend for t in tallies if not t.legitimate} and all(t.runs == 1 for t in tallies)
    assert not [t for t in tallies if t.legitimate and t.fails], "the kernel and held-out members pass on tiny"
    calls.clear()
    measure_rates("tiny", [0], 16, ["layer0"], 3, device=device)
    assert not calls


def test_selftest_rates_over_the_fp8_pool_from_the_command_line(tmp_path, capsys):
    from glmcheck import cli

    assert cli.main(["selftest", "--kv-cache-dtype", "fp8_e4m3"]) == 2
    assert "--kv-cache-dtype applies to the verdict-rates run only" in capsys.readouterr().err
    assert cli.main(["selftest", "--model", "tiny", "--power", "--kv-cache-dtype", "fp8_e4m3"]) == 2
    assert "not to --power" in capsys.readouterr().err
    code = cli.main(["selftest", "--model", "tiny", "--seeds", "1", "--checks", "layer0", "--tokens", "16", "--band",
                     "3", "--kv-cache-dtype", "fp8_e4m3", "--quiet"])
    out = capsys.readouterr().out
    assert code in (0, 1) and "KV cache fp8_e4m3" in out and "fault:rope_dropped" in out
