#!/usr/bin/env bash
# GPU run 30, call 4 (issue 43): the compaction variants again (call 3's script let a graph's buffers be freed: an
# illegal address, fixed), then the tests call 3's limit cut: the 128-case contract matrix (two shards side by side)
# and the pool past int32, on the kernel with the direct-slot compaction. Carry: .flashmla.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export GLMCHECK_FLASHMLA_LIB=$PWD/.flashmla/_flashmla_C.abi3.so
start=$(date +%s); T=${BUDGET:-400}
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"; } > $OUT/versions.txt 2>&1
R=docs/gpu-runs/2026-12-03-run30
timeout 60 python3 $R/compaction.py 1x2048:64,1x8192:64 > $OUT/compaction.txt 2>&1
echo "=== compaction rc $? after $(( $(date +%s) - start )) s"; grep -v Warn $OUT/compaction.txt | tail -n 4
PY="python3 -m pytest -q -rfE -p no:cacheprovider -m 'not multigpu and not slow'"
for i in 0 1; do
  ( GLMCHECK_MATRIX_SHARD=$i/2 GLMCHECK_MATRIX_LOG=$OUT/matrix-$i.md timeout $(( T - $(date +%s) + start - 10 )) \
      bash -c "$PY tests/test_contract_matrix.py::test_gpu_contract_matrix" > $OUT/pytest-matrix-$i.txt 2>&1
    echo "exit $?" >> $OUT/pytest-matrix-$i.txt ) &
done
( timeout $(( T - $(date +%s) + start - 10 )) bash -c "$PY tests/test_contract_matrix.py::test_gpu_pool_past_int32_offsets_every_path" \
    > $OUT/pytest-pool.txt 2>&1; echo "exit $?" >> $OUT/pytest-pool.txt ) &
wait
for f in $OUT/pytest-*.txt; do echo "== $f"; tail -n 3 $f; done
for i in 0 1; do tail -n 2 $OUT/matrix-$i.md; grep -vc "| pass |" $OUT/matrix-$i.md; done
echo "done after $(( $(date +%s) - start )) s"
