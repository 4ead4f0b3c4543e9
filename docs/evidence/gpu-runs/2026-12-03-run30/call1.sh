#!/usr/bin/env bash
# GPU run 30, call 1. Issue 40: layer0's 20-seed rates on ref-gpu with the temperature bias
# (`MODELS=ref-gpu:4096 SPLIT=2 bash scripts/gpu_layer0_rates.sh`). Beside it (issue 43), the kernel test files at real
# shapes on the code without the split Gluon tile (16b3298): gluon, half pairs, union, the contract matrix. Carry: .flashmla.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export GLMCHECK_FLASHMLA_LIB=$PWD/.flashmla/_flashmla_C.abi3.so
O=${OUT:-/tmp/out}; mkdir -p $O/rates; T=${BUDGET:-540}
( GLMCHECK_MATRIX_LOG=$O/matrix.md timeout $(( T - 30 )) python3 -m pytest -q -rfE -p no:cacheprovider -m 'not multigpu and not slow' \
    tests/test_gluon.py tests/test_gluon_half_pairs.py tests/test_union.py tests/test_contract_matrix.py > $O/pytest-kernel.txt 2>&1
  echo "exit $?" >> $O/pytest-kernel.txt ) &
OUT=$O/rates MODELS=ref-gpu:4096 SPLIT=2 BUDGET=$T bash scripts/gpu_layer0_rates.sh > /dev/null 2>&1
wait
echo "== pytest"; tail -n 8 $O/pytest-kernel.txt; tail -n 4 $O/matrix.md
echo "== rates"; cat $O/rates/rates.log
