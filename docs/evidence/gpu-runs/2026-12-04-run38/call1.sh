#!/usr/bin/env bash
# GPU run 38, call 1 (issue 57 item 5): the one-launch dequantiser's and the native FP8 per-token kernel's tests on
# the GPU, then per-token+len+deq against per-token+len+fp8 in paired rounds (H = 8 points; 1x8192 at H = 16, 64).
# Carry .whl and .flashmla.
set -uo pipefail
git log --oneline -1 > $OUT/commit.txt 2>/dev/null
NATIVE_LIMIT=150 STEPS=native bash scripts/gpu_fp8.sh $OUT/native
