#!/usr/bin/env bash
# GPU run 31, call 1 (issue 43 item 4): the compaction-free per-token path (RAW_ROWS) on the H200 for the first
# time: its GPU tests, the same under compute-sanitizer memcheck, then the A/B against the compacted path and
# FlashMLA+len (gated, bitwise equal to the compacted path, graph replays, 7 alternating rounds). Carry: .flashmla.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export GLMCHECK_FLASHMLA_LIB=$PWD/.flashmla/_flashmla_C.abi3.so
start=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; git log --oneline -1 2>/dev/null
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"; } > $OUT/versions.txt 2>&1
cat $OUT/versions.txt
PY="python3 -m pytest -q -rfE -p no:cacheprovider -m gpu"
timeout 150 $PY tests/test_gluon_raw_rows.py > $OUT/pytest-raw.txt 2>&1; echo "exit $?" >> $OUT/pytest-raw.txt
echo "=== raw tests after $(( $(date +%s) - start )) s"; tail -n 4 $OUT/pytest-raw.txt
timeout 200 compute-sanitizer --tool memcheck --target-processes all --error-exitcode 86 --log-file $OUT/memcheck.log \
  $PY tests/test_gluon_raw_rows.py > $OUT/memcheck-pytest.txt 2>&1; echo "exit $?" >> $OUT/memcheck-pytest.txt
echo "=== memcheck after $(( $(date +%s) - start )) s"; tail -n 3 $OUT/memcheck-pytest.txt; grep "ERROR SUMMARY" $OUT/memcheck.log | tail -n 2
if grep -q "^exit 0" $OUT/pytest-raw.txt; then
  timeout 200 python3 docs/gpu-runs/2026-12-03-run31/raw_rows_ab.py 1x2048:64,1x2048:128,1x8192:64,1x8192:128 \
    calibrated,drift10 > $OUT/ab.txt 2>&1; echo "exit $?" >> $OUT/ab.txt
  grep -v Warn $OUT/ab.txt | tail -n 12
fi
echo "done after $(( $(date +%s) - start )) s"
