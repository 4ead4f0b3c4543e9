#!/usr/bin/env bash
# GPU run 32, call 1 (issue 43, the contract on the final kernel: the staged write-out as the only write-out):
# the 128-case matrix in two shards beside compute-sanitizer memcheck over the Gluon and half-pair GPU tests,
# then the pool past int32 and the kernel test files. Carry: .flashmla.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export GLMCHECK_FLASHMLA_LIB=$PWD/.flashmla/_flashmla_C.abi3.so
start=$(date +%s); deadline=$(( start + ${BUDGET:-400} )); left() { echo $(( deadline - $(date +%s) )); }
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"; } > $OUT/versions.txt 2>&1
PY="python3 -m pytest -q -rfE -p no:cacheprovider -m 'not multigpu and not slow'"
for i in 0 1; do
  ( GLMCHECK_MATRIX_SHARD=$i/2 GLMCHECK_MATRIX_LOG=$OUT/matrix-$i.md timeout 220 \
      bash -c "$PY tests/test_contract_matrix.py::test_gpu_contract_matrix" > $OUT/pytest-matrix-$i.txt 2>&1
    echo "exit $?" >> $OUT/pytest-matrix-$i.txt ) &
done
( timeout 220 compute-sanitizer --tool memcheck --target-processes all --error-exitcode 86 --log-file $OUT/memcheck.log \
    python3 -m pytest -q -rfE -p no:cacheprovider -m gpu tests/test_gluon.py tests/test_gluon_half_pairs.py > $OUT/memcheck-pytest.txt 2>&1
  echo "exit $?" >> $OUT/memcheck-pytest.txt ) &
wait
echo "=== matrix + memcheck after $(( $(date +%s) - start )) s"
for f in $OUT/pytest-matrix-*.txt $OUT/memcheck-pytest.txt; do echo "== $f"; tail -n 2 $f; done
grep "ERROR SUMMARY" $OUT/memcheck.log | tail -n 1
for i in 0 1; do tail -n 2 $OUT/matrix-$i.md; done
timeout $(( $(left) - 5 )) bash -c "$PY -m gpu tests/test_contract_matrix.py tests/test_gluon.py tests/test_token_rows.py tests/test_tiles.py -k 'not test_gpu_contract_matrix'" \
  > $OUT/pytest-kernel-files.txt 2>&1
echo "=== kernel files rc $? after $(( $(date +%s) - start )) s"; tail -n 4 $OUT/pytest-kernel-files.txt
