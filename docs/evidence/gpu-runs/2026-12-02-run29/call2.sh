#!/usr/bin/env bash
# GPU run 29, call 2 (issue 43, the bars in one run): `glmcheck bench` (eager, every point gated against fp32 first)
# at the H = 8 points, 1 x 8192 at H = 16 / 32 / 64 / 96 / 128 and 1 x 2048 at H = 64 / 128, calibrated indices; then
# the random walks (drift10, drift2, --quick) at the H >= 16 points; then the GLM-5.2 schedule at 8192 tokens if
# time is left. Ping-pong at every union group. Carry: .flashmla.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
export GLMCHECK_FLASHMLA_LIB=$PWD/.flashmla/_flashmla_C.abi3.so
start=$(date +%s); deadline=$(( start + ${BUDGET:-480} ))
left() { echo $(( deadline - $(date +%s) )); }
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"; } > $OUT/versions.txt 2>&1
POINTS=1x2048:8,1x4096:8,1x8192:8,2x4096:8,4x2048:8,1x8192:16,1x8192:32,1x8192:64,1x8192:96,1x8192:128,1x2048:64,1x2048:128
timeout $(( $(left) - 200 )) python3 -m glmcheck bench --quiet --pair-rounds 0 --points $POINTS \
  --out /tmp/rec/bench-calibrated > $OUT/bench-calibrated.txt 2>&1
echo "=== bench calibrated rc $? after $(( $(date +%s) - start )) s"; tail -n 40 $OUT/bench-calibrated.txt
for mode in drift10 drift2; do
  timeout $(( ($(left) - 60) / 2 )) python3 -m glmcheck bench --quiet --quick --pair-rounds 0 --index-mode $mode \
    --points 1x8192:16,1x8192:32,1x8192:64,1x8192:128,1x2048:64,1x2048:128 --out /tmp/rec/bench-$mode > $OUT/bench-$mode.txt 2>&1
  echo "=== bench $mode rc $? after $(( $(date +%s) - start )) s"; tail -n 24 $OUT/bench-$mode.txt
done
if [ $(left) -gt 90 ]; then
  timeout $(( $(left) - 10 )) python3 -m glmcheck bench --model glm-5.2 --layers 8 --experts 16 --tp 8 --tokens 8192 \
    --indices calibrated --quiet --out /tmp/rec/bench-model > $OUT/bench-model.txt 2>&1
  echo "=== bench model rc $? after $(( $(date +%s) - start )) s"; tail -n 25 $OUT/bench-model.txt
fi
tar -C /tmp -czf $OUT/bench-records.tgz rec 2>/dev/null
