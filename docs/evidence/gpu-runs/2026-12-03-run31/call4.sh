#!/usr/bin/env bash
# GPU run 31, call 4 (issue 43 item 4): the staged write-out (STAGED_OUT). The Gluon GPU tests on it first (fp64 on
# poisoned outputs at every G, head slices, padded heads), then staged_out_ab.py (bitwise equal to the direct
# write-out, gated, graph replays, 7 alternating rounds). Carry: .flashmla.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export GLMCHECK_FLASHMLA_LIB=$PWD/.flashmla/_flashmla_C.abi3.so
start=$(date +%s)
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; git log --oneline -1 2>/dev/null; } > $OUT/versions.txt 2>&1
timeout 150 python3 -m pytest -q -rfE -p no:cacheprovider -m gpu tests/test_gluon*.py > $OUT/pytest-gluon.txt 2>&1
echo "exit $?" >> $OUT/pytest-gluon.txt; echo "=== gluon tests after $(( $(date +%s) - start )) s"; tail -n 3 $OUT/pytest-gluon.txt
if grep -q "^exit 0" $OUT/pytest-gluon.txt; then
  timeout 300 python3 docs/gpu-runs/2026-12-03-run31/staged_out_ab.py \
    1x2048:64,1x2048:128,1x8192:64,1x8192:128,1x8192:8,1x8192:16,1x8192:32 calibrated,drift10 > $OUT/ab.txt 2>&1
  echo "exit $?" >> $OUT/ab.txt; grep -v Warn $OUT/ab.txt | tail -n 16
fi
echo "done after $(( $(date +%s) - start )) s"
