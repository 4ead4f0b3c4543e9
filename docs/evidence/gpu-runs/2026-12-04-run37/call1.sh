#!/usr/bin/env bash
# GPU run 37, call 1 (issue 57, and the band's GPU paths not yet run there): the band / reference / FP8 / flashmla_kv
# tests on the device in one pytest, layer0 over the FP8 pool (glm-5.2 tp 8 and ref-gpu, 4096 tokens), then the
# kernel bench with the FP8 columns in the time left (interrupted with SIGINT: finished points are kept).
# Carry .whl and .flashmla.
set -uo pipefail
start=$(date +%s); deadline=$(( start + ${BUDGET:-570} )); left() { echo $(( deadline - $(date +%s) )); }
source scripts/gpu_env.sh
git log --oneline -1 > $OUT/commit.txt 2>/dev/null
timeout 250 python3 -m pytest -m "gpu or not gpu" -q -rfE -p no:cacheprovider tests/test_band_kernels.py \
  tests/test_band_triton.py tests/test_reference_triton.py tests/test_fp8_band.py tests/test_flashmla_kv.py \
  tests/test_bench_fp8.py > $OUT/pytest-gpu.txt 2>&1
echo "=== GPU tests: rc $? after $(( $(date +%s) - start )) s"; tail -n 12 $OUT/pytest-gpu.txt
STEPS=layer0 bash scripts/gpu_fp8.sh $OUT/fp8
echo "=== layer0 after $(( $(date +%s) - start )) s"
timeout -s INT $(( $(left) - 15 )) python3 -m glmcheck bench --kv-cache-dtype fp8_e4m3 --quiet --overwrite \
  --out $OUT/fp8/rec-bench-fp8 > $OUT/fp8/bench-fp8.txt 2>&1
echo "=== bench fp8: rc $? after $(( $(date +%s) - start )) s"; grep -E "^\|" $OUT/fp8/bench-fp8.txt | head -n 40
tail -n 5 $OUT/fp8/bench-fp8.txt
cd $OUT && tar -czf fp8.tgz fp8 && rm -rf fp8
