#!/usr/bin/env bash
# GPU run 31, call 3 (issue 43, the bars in one run on the final kernel): `glmcheck bench` (eager, every point gated
# against fp32 first) over the 12 issue-43 points on calibrated indices, then the random walks (drift10, drift2,
# --quick) at the H >= 16 points, then the GLM-5.2 schedule at 8192 tokens (weighted over its 21 full + 57 shared
# layers). Carry: .flashmla.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export GLMCHECK_FLASHMLA_LIB=$PWD/.flashmla/_flashmla_C.abi3.so
start=$(date +%s); deadline=$(( start + ${BUDGET:-570} )); left() { echo $(( deadline - $(date +%s) )); }
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; git log --oneline -1 2>/dev/null
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"; } > $OUT/versions.txt 2>&1
POINTS=1x2048:8,1x4096:8,1x8192:8,2x4096:8,4x2048:8,1x8192:16,1x8192:32,1x8192:64,1x8192:96,1x8192:128,1x2048:64,1x2048:128
timeout $(( $(left) - 260 )) python3 -m glmcheck bench --quiet --pair-rounds 0 --points $POINTS \
  --out /tmp/rec/bench-calibrated > $OUT/bench-calibrated.txt 2>&1
echo "=== bench calibrated rc $? after $(( $(date +%s) - start )) s"; grep "^| 1x\|^| 2x\|^| 4x\|geomean" $OUT/bench-calibrated.txt | head -n 26
for mode in drift10 drift2; do
  timeout $(( ($(left) - 150) / 2 )) python3 -m glmcheck bench --quiet --quick --pair-rounds 0 --index-mode $mode \
    --points 1x8192:16,1x8192:32,1x8192:64,1x8192:96,1x8192:128,1x2048:64,1x2048:128 --out /tmp/rec/bench-$mode > $OUT/bench-$mode.txt 2>&1
  echo "=== bench $mode rc $? after $(( $(date +%s) - start )) s"; grep "vs flash+len\|^| 1x" $OUT/bench-$mode.txt | tail -n 8
done
if [ $(left) -gt 100 ]; then
  timeout $(( $(left) - 10 )) python3 -m glmcheck bench --model glm-5.2 --layers 8 --experts 16 --tp 8 --tokens 8192 \
    --indices calibrated --quiet --out /tmp/rec/bench-model > $OUT/bench-model.txt 2>&1
  echo "=== bench model rc $? after $(( $(date +%s) - start )) s"; tail -n 25 $OUT/bench-model.txt
fi
tar -C /tmp -czf $OUT/bench-records.tgz rec 2>/dev/null
echo "done after $(( $(date +%s) - start )) s"
