#!/usr/bin/env bash
# GPU run 39, call 2 (issue 55): compile ahead. Its GPU test (cold tiny layer0 in two processes: the forwards compile
# nothing after it, rows equal), then layer0 glm-5.2 tp 8 and firsttoken ref-gpu heldout50, each cold (a fresh Triton
# cache) then warm, with GLMCHECK_COMPILE_AHEAD=0 (before) and =1 (after) on this one machine; record diffs.
set -uo pipefail
export PYTHONPATH=$PWD
source scripts/gpu_env.sh
mkdir -p $OUT/t
git log --oneline -1 > $OUT/t/commit.txt 2>/dev/null
python3 -c "import torch, transformers, triton" # page cache: the first timed import is not the disk's
timeout 200 python3 -m pytest -q -m gpu tests/test_compile_ahead.py -p no:cacheprovider > $OUT/t/pytest-gpu.txt 2>&1
echo "=== pytest: rc $?"; tail -n 3 $OUT/t/pytest-gpu.txt
for ahead in 0 1; do
  GLMCHECK_COMPILE_AHEAD=$ahead STEPS="layer0 firsttoken" LIMIT=150 bash scripts/gpu_time_to_verdict.sh $OUT/t/ahead$ahead
done
for step in layer0-cold layer0 firsttoken-cold; do
  echo "== diff $step"; python3 scripts/record_diff.py $OUT/t/ahead0/*/rec-$step $OUT/t/ahead1/*/rec-$step 2>&1 | tail -n 4
done
cd $OUT && tar czf t.tgz t && rm -rf t
