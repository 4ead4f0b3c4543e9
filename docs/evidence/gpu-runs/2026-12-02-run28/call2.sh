#!/usr/bin/env bash
# GPU run 28, call 2: the marks build as "auto" across the contract. First alone: the GLM-5.2 schedule's attention at
# 8192 tokens (bench --model, calibrated indices: union reused vs rebuilt per full layer vs FlashMLA+len). Then side
# by side: the contract matrix with the kernel test files (union, marks, plan), and compute-sanitizer memcheck over
# the union and marks tests. Carry: .flashmla.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
export GLMCHECK_FLASHMLA_LIB=$PWD/.flashmla/_flashmla_C.abi3.so
start=$(date +%s); deadline=$(( start + ${BUDGET:-540} ))
left() { echo $(( deadline - $(date +%s) )); }
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"; } > $OUT/versions.txt 2>&1
timeout 200 python3 -m glmcheck bench --model glm-5.2 --layers 8 --experts 16 --tp 8 --tokens 8192 --indices calibrated \
  --quiet --out /tmp/rec/bench-model 2>&1 | tee $OUT/bench-model.txt | tail -n 25
echo "=== bench model rc ${PIPESTATUS[0]} after $(( $(date +%s) - start )) s"
GLMCHECK_MATRIX_LOG=$OUT/matrix.md timeout $(( $(left) - 15 )) python3 -m pytest -q -rfE -p no:cacheprovider \
  -m "not multigpu and not slow" tests/test_contract_matrix.py tests/test_union.py tests/test_union_marks.py \
  tests/test_plan.py > $OUT/pytest-contract.txt 2>&1 &
pid=$!
timeout $(( $(left) - 15 )) compute-sanitizer --tool memcheck --target-processes all --error-exitcode 86 \
  --log-file $OUT/memcheck.log python3 -m pytest -q -p no:cacheprovider -m "not multigpu and not slow" \
  tests/test_union_marks.py tests/test_union.py -k "not real_shape and not graph_capture" > $OUT/memcheck-pytest.txt 2>&1
echo "=== memcheck rc $? after $(( $(date +%s) - start )) s"; tail -n 3 $OUT/memcheck-pytest.txt
grep -E "ERROR SUMMARY" $OUT/memcheck.log | tail -n 3
wait $pid; echo "=== contract rc $? after $(( $(date +%s) - start )) s"; tail -n 8 $OUT/pytest-contract.txt; tail -n 3 $OUT/matrix.md
tar -C /tmp -czf $OUT/bench-records.tgz rec 2>/dev/null
