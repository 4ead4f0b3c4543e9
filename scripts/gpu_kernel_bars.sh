#!/usr/bin/env bash
# Issue 43's bars on the H200 (docs/performance.md, "Against the bars: the fast tile, a cheap build, the prefix without
# a build"), in two device calls of under 600 s each. Carry: .flashmla. Tables and records go to $OUT.
#   PART=1: `glmcheck bench` over the 12 issue-43 points in one run (calibrated, eager, every point gated first),
#           then the GLM-5.2 schedule at 8192 tokens (weighted over its 21 full + 57 shared indexer layers).
#   PART=2: the random walks (drift10, drift2; --quick) at the H >= 16 points, then paired per-token+len /
#           FlashMLA+len rounds at the 64- and 128-head points on drift10.
# Measured durations (run 31, warm machine): the calibrated run ~170 s, each --quick random walk ~120 s, the schedule
# ~70 s, a 4-point paired run ~80 s. Keep BUDGET 20 s under the call's limit: a call killed at its limit returns
# nothing; each step's timeout comes from what is left.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export GLMCHECK_FLASHMLA_LIB=$PWD/.flashmla/_flashmla_C.abi3.so
start=$(date +%s); deadline=$(( start + ${BUDGET:-560} )); left() { echo $(( deadline - $(date +%s) )); }
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"; } > $OUT/versions.txt 2>&1
step() {  # name seconds command...: run a step with its own limit, print its tables' rows
  local name=$1 limit=$2; shift 2
  timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1
  echo "=== $name rc $? after $(( $(date +%s) - start )) s"; grep -E "^\| [124]x|geomean|paired|schedule|best" "$OUT/$name.txt" | head -n 40
}
BENCH="python3 -m glmcheck bench --quiet"
WIDE=1x8192:16,1x8192:32,1x8192:64,1x8192:96,1x8192:128,1x2048:64,1x2048:128
case ${PART:-1} in
  1) step bench-calibrated $(( $(left) - 90 )) $BENCH --pair-rounds 0 --out /tmp/rec/bench-calibrated \
       --points 1x2048:8,1x4096:8,1x8192:8,2x4096:8,4x2048:8,$WIDE
     step bench-model $(( $(left) - 5 )) $BENCH --model glm-5.2 --layers 8 --experts 16 --tp 8 --tokens 8192 \
       --indices calibrated --out /tmp/rec/bench-model ;;
  2) step bench-drift10 $(( $(left) - 330 )) $BENCH --quick --pair-rounds 0 --index-mode drift10 --points $WIDE \
       --out /tmp/rec/bench-drift10
     step bench-drift2 $(( $(left) - 160 )) $BENCH --quick --pair-rounds 0 --index-mode drift2 --points $WIDE \
       --out /tmp/rec/bench-drift2
     step bench-paired-drift10 $(( $(left) - 5 )) $BENCH --pair-rounds 5 --paired per-token+len,flashmla+len \
       --index-mode drift10 --points 1x2048:64,1x2048:128,1x8192:64,1x8192:128 --out /tmp/rec/bench-paired-drift10 ;;
  *) echo "PART must be 1 or 2" >&2; exit 2 ;;
esac
tar -C /tmp -czf $OUT/bench-records.tgz rec 2>/dev/null
echo "done after $(( $(date +%s) - start )) s"
