#!/usr/bin/env bash
# GPU run 37, call 2: layer0's verdict rates over the FP8 pool on ref-gpu, 20 seeds at 4096 tokens (issue 57's bar:
# false alarms <= 5 %, detection >= 90 %), beside them the GPU contract matrix in two shards and the FP8 / kernel
# test files (the per-token and marks-build launch sizes changed: one loop size for every top-k). Correctness only
# in this call: nothing here is timed. Carry .whl and .flashmla.
set -uo pipefail
start=$(date +%s)
source scripts/gpu_env.sh
PY="python3 -m pytest -q -rfE -p no:cacheprovider"
( MODELS=ref-gpu:4096 KV=fp8_e4m3 SPLIT=4 BUDGET=545 bash scripts/gpu_layer0_rates.sh > /dev/null 2>&1 ) &
rates=$!
sleep 60  # seed 0 fills the Triton cache alone first
for i in 0 1; do
  ( GLMCHECK_MATRIX_SHARD=$i/2 GLMCHECK_MATRIX_LOG=$OUT/matrix-$i.md timeout 300 \
      $PY -m gpu tests/test_contract_matrix.py > $OUT/pytest-matrix-$i.txt 2>&1; echo "exit $?" >> $OUT/pytest-matrix-$i.txt ) &
done
( timeout 300 $PY -m "gpu or not gpu" tests/test_fp8_band.py tests/test_flashmla_kv.py tests/test_bench_fp8.py \
    tests/test_union_marks.py tests/test_per_token.py > $OUT/pytest-gpu.txt 2>&1; echo "exit $?" >> $OUT/pytest-gpu.txt ) &
wait
echo "=== all done after $(( $(date +%s) - start )) s"
for f in $OUT/pytest-*.txt; do echo "== $f"; tail -n 3 $f; done
for i in 0 1; do tail -n 2 $OUT/matrix-$i.md 2>/dev/null; done
cat $OUT/rates.log
