"""How far apart legitimate FP8-native and bf16-on-dequantised kernels are (issue 57; docs/reliability.md, "The FP8
KV cache"): at GLM-5.x's geometry (512 + 64, top-k 2048) on rows quantised to DSA's FP8 pool, the band's members in
their bf16 and FP8 forms against the fp64 reference on the same pool, each FP8 member against its bf16 twin, and the
pool's quantisation itself (the fp64 reference on the bf16 rows against it). Torch forms, on the CPU.

    python scripts/fp8_band_distance.py [--tokens 128] [--heads 16] [--seeds 3]
"""

from __future__ import annotations

import argparse
import os

import torch

os.environ.setdefault("GLMCHECK_BAND_IMPL", "torch")

from glmcheck.backends.band_kernels import fp8_band_variant
from glmcheck.backends.reference import band_variant, sparse_mla_reference
from glmcheck.checks import metrics
from glmcheck.data.inputs import random_distinct_indices
from glmcheck.kernels.fp8 import dequantize_kv_pool, quantize_kv_pool


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    print(f"T {args.tokens}, H {args.heads}, S {args.rows}, top-k 2048, d_qk 576 (512 + 64); rel-L2")
    print("| seed | bf16 members vs exact (FP8 pool) | FP8 members 1, 3 vs exact | FP8 member vs its bf16 twin "
          "| exact on the bf16 rows vs exact on the pool |")
    print("|---|---|---|---|---|")
    for seed in range(args.seeds):
        g = torch.Generator().manual_seed(seed)
        raw = torch.randn(args.rows, 576, generator=g).bfloat16()
        kv = dequantize_kv_pool(quantize_kv_pool(raw), args.rows)
        q = (torch.randn(args.tokens, args.heads, 576, generator=g) * 0.1).bfloat16()
        indices = random_distinct_indices(args.tokens, 2048, args.rows, g)
        scale = 576 ** -0.5
        exact = sparse_mla_reference(q, kv, indices, scale, 512)
        on_bf16 = sparse_mla_reference(q, raw, indices, scale, 512)
        twins = {k: band_variant(k)(q, kv, indices, scale, 512) for k in range(4)}
        fp8 = {k: fp8_band_variant(k)(q, kv, indices, scale, 512) for k in (1, 3)}
        bf16_d = ", ".join(f"{metrics.rel_l2(o, exact):.3e}" for o in twins.values())
        fp8_d = ", ".join(f"{metrics.rel_l2(o, exact):.3e}" for o in fp8.values())
        twin_d = ", ".join(f"{metrics.rel_l2(fp8[k], twins[k]):.2e}" for k in fp8)
        print(f"| {seed} | {bf16_d} | {fp8_d} | {twin_d} | {metrics.rel_l2(on_bf16, exact):.3e} |")


if __name__ == "__main__":
    main()
