#!/usr/bin/env bash
# GPU run 30, call 5: compute-sanitizer memcheck over the per-token compaction (512-slot steps) and its consumers:
# the token-row tests and the plan's GPU tests. No carry.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
timeout ${BUDGET:-200} compute-sanitizer --tool memcheck --target-processes all --error-exitcode 86 --log-file $OUT/memcheck.log \
  python3 -m pytest -q -rfE -p no:cacheprovider -m 'not multigpu and not slow' tests/test_token_rows.py \
  tests/test_plan.py::test_gpu_plan_on_every_tile_gives_the_same_bits -k "not real_shape" > $OUT/memcheck-pytest.txt 2>&1
echo "exit $?" >> $OUT/memcheck-pytest.txt; tail -n 4 $OUT/memcheck-pytest.txt; grep "ERROR SUMMARY" $OUT/memcheck.log | tail -n 2
