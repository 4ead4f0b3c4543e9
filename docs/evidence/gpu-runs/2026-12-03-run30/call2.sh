#!/usr/bin/env bash
# GPU run 30, call 2 (issue 43): (1) paired rounds, per-token+len against FlashMLA+len, at the three 64-head points the
# bars leave open or noisy, calibrated and drift10; (2) where the per-token path's time goes at those points (pieces.py:
# compaction, ping-pong with a plan, whole call, FlashMLA+len; graph replays); (3) the GLM-5.2 schedule at 8192 tokens
# with the span holding only backend calls and builds (b44f78b). Carry: .flashmla.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export GLMCHECK_FLASHMLA_LIB=$PWD/.flashmla/_flashmla_C.abi3.so
start=$(date +%s); deadline=$(( start + ${BUDGET:-560} )); left() { echo $(( deadline - $(date +%s) )); }
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"; } > $OUT/versions.txt 2>&1
R=docs/gpu-runs/2026-12-03-run30
timeout $(( $(left) - 300 )) python3 $R/pieces.py 1x2048:64,1x2048:128,1x8192:64 calibrated,drift10 > $OUT/pieces.txt 2>&1
echo "=== pieces rc $? after $(( $(date +%s) - start )) s"; cat $OUT/pieces.txt | grep -v Warning
for mode in calibrated drift10; do
  timeout $(( ($(left) - 100) / 2 )) python3 -m glmcheck bench --quiet --pair-rounds 5 --paired per-token+len,flashmla+len \
    --index-mode $mode --points 1x8192:64,1x2048:64,1x2048:128 --out /tmp/rec/bench-paired-$mode > $OUT/bench-paired-$mode.txt 2>&1
  echo "=== bench paired $mode rc $? after $(( $(date +%s) - start )) s"; tail -n 30 $OUT/bench-paired-$mode.txt
done
if [ $(left) -gt 80 ]; then
  timeout $(( $(left) - 10 )) python3 -m glmcheck bench --model glm-5.2 --layers 8 --experts 16 --tp 8 --tokens 8192 \
    --indices calibrated --quiet --out /tmp/rec/bench-model > $OUT/bench-model.txt 2>&1
  echo "=== bench model rc $? after $(( $(date +%s) - start )) s"; tail -n 25 $OUT/bench-model.txt
fi
tar -C /tmp -czf $OUT/bench-records.tgz rec 2>/dev/null
