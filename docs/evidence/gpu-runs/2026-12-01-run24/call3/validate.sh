#!/usr/bin/env bash
# GPU correctness of the half-pair kernel: kernel tests (real shapes), the contract matrix, and memcheck, in parallel.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export GLMCHECK_FLASHMLA_LIB=$PWD/.flashmla/_flashmla_C.abi3.so
[ -d /tmp/site/datasets ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
O=${OUT:-/tmp/out}; mkdir -p $O
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; git log -1 --oneline 2>/dev/null
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $O/versions.txt 2>&1
PY="python3 -m pytest -q -rfE -p no:cacheprovider -m 'gpu or not gpu'"
KEEP='not real_shape and not int64_addressing and not graph_capture and not past_int32'
( GLMCHECK_MATRIX_LOG=$O/matrix.md timeout 520 bash -c "$PY tests/test_contract_matrix.py tests/test_gluon.py tests/test_gluon_half_pairs.py tests/test_plan.py tests/test_token_rows.py tests/test_pingpong_protocol.py" > $O/pytest-kernel.txt 2>&1 ) &
for i in 0 1; do
  ( GLMCHECK_MATRIX_SHARD=$i/2 GLMCHECK_MATRIX_LOG=$O/matrix-memcheck-$i.md timeout 520 compute-sanitizer --tool memcheck --target-processes all --error-exitcode 86 --log-file $O/memcheck-$i.log \
      bash -c "$PY tests/test_contract_matrix.py -k '$KEEP'" > $O/memcheck-$i-pytest.txt 2>&1; echo "exit $?" >> $O/memcheck-$i-pytest.txt ) &
done
( timeout 520 compute-sanitizer --tool memcheck --target-processes all --error-exitcode 86 --log-file $O/memcheck-k.log \
    bash -c "$PY tests/test_gluon.py tests/test_gluon_half_pairs.py tests/test_per_token.py tests/test_union.py -k '$KEEP'" > $O/memcheck-k-pytest.txt 2>&1; echo "exit $?" >> $O/memcheck-k-pytest.txt ) &
wait
for f in $O/pytest-kernel.txt $O/memcheck-*-pytest.txt; do echo "== $f"; tail -n 4 $f; done
for f in $O/memcheck-*.log; do echo "== $f"; grep -E "ERROR SUMMARY" $f | tail -n 2; done
tail -n 6 $O/matrix.md
