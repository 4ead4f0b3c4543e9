#!/usr/bin/env bash
# GPU run 30, call 3 (issue 43): the per-token compaction with direct slot addressing (token_rows.py) and the marks
# build's block / warps, timed against the old forms (compaction.py, builds.py); the per-token path's pieces and the
# paired 64-head points again with the new compaction; then the tests call 1 left: the three GPU tests the split
# removal broke (a stale keyword, fixed), the 128-case contract matrix and the pool past int32 (cut by call 1's
# limit), and the token-row / plan tests on the new kernel. Carry: .flashmla.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export GLMCHECK_FLASHMLA_LIB=$PWD/.flashmla/_flashmla_C.abi3.so
start=$(date +%s); deadline=$(( start + ${BUDGET:-560} )); left() { echo $(( deadline - $(date +%s) )); }
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"; } > $OUT/versions.txt 2>&1
R=docs/gpu-runs/2026-12-03-run30
timeout 90 python3 $R/compaction.py 1x2048:64,1x8192:64 > $OUT/compaction.txt 2>&1
echo "=== compaction rc $? after $(( $(date +%s) - start )) s"; grep -v Warn $OUT/compaction.txt | tail -n 4
timeout 90 python3 $R/builds.py 1x8192,2x4096,4x2048 > $OUT/builds.txt 2>&1
echo "=== builds rc $? after $(( $(date +%s) - start )) s"; grep -v Warn $OUT/builds.txt | tail -n 5
timeout 80 python3 $R/pieces.py 1x2048:64,1x2048:128,1x8192:64 calibrated > $OUT/pieces.txt 2>&1
echo "=== pieces rc $? after $(( $(date +%s) - start )) s"; grep -v Warn $OUT/pieces.txt
GLMCHECK_MATRIX_LOG=$OUT/matrix.md timeout 200 python3 -m pytest -q -rfE -p no:cacheprovider -m 'not multigpu and not slow' \
  tests/test_token_rows.py tests/test_plan.py::test_gpu_plan_on_every_tile_gives_the_same_bits tests/test_plan.py::test_gpu_plan_and_its_call_are_captured_in_one_cuda_graph "tests/test_gluon.py::test_gpu_pingpong_tile_never_addresses_through_rows_past_the_length" \
  tests/test_contract_matrix.py::test_gpu_contract_matrix tests/test_contract_matrix.py::test_gpu_pool_past_int32_offsets_every_path \
  > $OUT/pytest.txt 2>&1
echo "=== pytest rc $? after $(( $(date +%s) - start )) s"; tail -n 6 $OUT/pytest.txt; tail -n 3 $OUT/matrix.md
for mode in calibrated drift10; do
  [ $(left) -gt 70 ] || break
  timeout $(( ($(left) - 10) / 2 )) python3 -m glmcheck bench --quiet --pair-rounds 5 --paired per-token+len,flashmla+len \
    --index-mode $mode --points 1x8192:64,1x2048:64,1x2048:128 --out /tmp/rec/bench-paired-$mode > $OUT/bench-paired-$mode.txt 2>&1
  echo "=== bench paired $mode rc $? after $(( $(date +%s) - start )) s"; tail -n 14 $OUT/bench-paired-$mode.txt | head -n 7
done
tar -C /tmp -czf $OUT/bench-records.tgz rec 2>/dev/null
