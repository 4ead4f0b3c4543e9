#!/usr/bin/env bash
# GPU run 31, call 2 (issue 43): the contract on the final kernel (RAW_ROWS removed: the kernel of 61cc045, 512-slot
# compaction steps): the 128-case matrix in two shards side by side, the pool past int32, then the Gluon, token-row
# and plan GPU test files. Carry: .flashmla.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export GLMCHECK_FLASHMLA_LIB=$PWD/.flashmla/_flashmla_C.abi3.so
start=$(date +%s); T=${BUDGET:-330}
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; git log --oneline -1 2>/dev/null
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"; } > $OUT/versions.txt 2>&1
PY="python3 -m pytest -q -rfE -p no:cacheprovider -m 'not multigpu and not slow'"
for i in 0 1; do
  ( GLMCHECK_MATRIX_SHARD=$i/2 GLMCHECK_MATRIX_LOG=$OUT/matrix-$i.md timeout $(( T - 120 )) \
      bash -c "$PY tests/test_contract_matrix.py::test_gpu_contract_matrix" > $OUT/pytest-matrix-$i.txt 2>&1
    echo "exit $?" >> $OUT/pytest-matrix-$i.txt ) &
done
( timeout $(( T - 120 )) bash -c "$PY tests/test_contract_matrix.py::test_gpu_pool_past_int32_offsets_every_path" \
    > $OUT/pytest-pool.txt 2>&1; echo "exit $?" >> $OUT/pytest-pool.txt ) &
wait
echo "=== matrix after $(( $(date +%s) - start )) s"
timeout $(( T - $(date +%s) + start - 5 )) bash -c "$PY -m gpu tests/test_gluon*.py tests/test_token_rows.py tests/test_plan.py" \
  > $OUT/pytest-files.txt 2>&1; echo "exit $?" >> $OUT/pytest-files.txt
for f in $OUT/pytest-*.txt; do echo "== $f"; tail -n 3 $f; done
for i in 0 1; do tail -n 2 $OUT/matrix-$i.md; echo "rows not passing: $(grep '^| ' $OUT/matrix-$i.md | grep -vc '| pass |')"; done
echo "done after $(( $(date +%s) - start )) s"
