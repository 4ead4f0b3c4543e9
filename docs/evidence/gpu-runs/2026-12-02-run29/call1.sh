#!/usr/bin/env bash
# GPU run 29, call 1 (issue 43, the contract on the final kernel): ping-pong at every union group (PINGPONG_GROUPS =
# (1, 2, 4, 8)). Side by side: the contract matrix with the kernel test files whose path the flip changed (gluon, half pairs, plan, union; real shapes), and compute-sanitizer
# memcheck over the matrix (two shards) and over the kernel tests at CPU shapes. Carry: .flashmla.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export GLMCHECK_FLASHMLA_LIB=$PWD/.flashmla/_flashmla_C.abi3.so
O=${OUT:-/tmp/out}; mkdir -p $O; T=${BUDGET:-540}
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"; } > $O/versions.txt 2>&1
PY="python3 -m pytest -q -rfE -p no:cacheprovider -m 'not multigpu and not slow'"
KEEP='not real_shape and not int64_addressing and not graph_capture and not past_int32'
( GLMCHECK_MATRIX_LOG=$O/matrix.md timeout $T bash -c "$PY tests/test_contract_matrix.py tests/test_gluon.py tests/test_gluon_half_pairs.py tests/test_plan.py tests/test_union.py" > $O/pytest-kernel.txt 2>&1; echo "exit $?" >> $O/pytest-kernel.txt ) &
for i in 0 1; do
  ( GLMCHECK_MATRIX_SHARD=$i/2 GLMCHECK_MATRIX_LOG=$O/matrix-memcheck-$i.md timeout $T compute-sanitizer --tool memcheck --target-processes all --error-exitcode 86 --log-file $O/memcheck-$i.log \
      bash -c "$PY tests/test_contract_matrix.py -k '$KEEP'" > $O/memcheck-$i-pytest.txt 2>&1; echo "exit $?" >> $O/memcheck-$i-pytest.txt ) &
done
( timeout $T compute-sanitizer --tool memcheck --target-processes all --error-exitcode 86 --log-file $O/memcheck-k.log \
    bash -c "$PY tests/test_gluon.py tests/test_gluon_half_pairs.py tests/test_union.py -k '$KEEP'" > $O/memcheck-k-pytest.txt 2>&1; echo "exit $?" >> $O/memcheck-k-pytest.txt ) &
wait
for f in $O/pytest-kernel.txt $O/memcheck-*-pytest.txt; do echo "== $f"; tail -n 4 $f; done
for f in $O/memcheck-*.log; do echo "== $f"; grep -E "ERROR SUMMARY" $f | tail -n 2; done
tail -n 6 $O/matrix.md
