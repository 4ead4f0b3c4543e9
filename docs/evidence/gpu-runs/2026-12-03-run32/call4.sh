#!/usr/bin/env bash
# GPU run 32, call 4 (issue 43): what calls 2 and 3 left within 3 % or in doubt. Paired per-token+len / FlashMLA+len
# rounds at the 64- and 128-head points on calibrated and drift2 indices; the H = 8 points again (eager, 1 x 2048 not
# first, union8+len / FlashMLA+len paired) and as CUDA-graph replays (GPU time, build included). Carry: .flashmla.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export GLMCHECK_FLASHMLA_LIB=$PWD/.flashmla/_flashmla_C.abi3.so
start=$(date +%s); deadline=$(( start + ${BUDGET:-560} )); left() { echo $(( deadline - $(date +%s) )); }
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $OUT/versions.txt 2>&1
run() {  # NAME SECONDS ARGS...
  local name=$1 limit=$2; shift 2
  timeout "$limit" python3 -m glmcheck bench --quiet "$@" --out /tmp/rec/$name > $OUT/$name.txt 2>&1
  echo "=== $name rc $? after $(( $(date +%s) - start )) s"; grep -A7 "^paired rounds" $OUT/$name.txt | tail -n 6
}
H64=1x2048:64,1x2048:128,1x8192:64,1x8192:128
H8=4x2048:8,1x2048:8,1x4096:8,1x8192:8,2x4096:8
run bench-paired-calibrated 120 --pair-rounds 5 --paired per-token+len,flashmla+len --index-mode calibrated --points $H64
run bench-paired-drift2 120 --pair-rounds 5 --paired per-token+len,flashmla+len --index-mode drift2 --points $H64
run bench-h8-eager $(( ($(left) - 10) * 6 / 10 )) --pair-rounds 5 --paired union8+len,flashmla+len --points $H8
grep -E "^\| [124]x" $OUT/bench-h8-eager.txt | head -n 5 | cut -c1-250
run bench-h8-graph $(( $(left) - 10 )) --timing graph --pair-rounds 0 --points $H8
grep -E "^\| [124]x" $OUT/bench-h8-graph.txt | head -n 5 | cut -c1-250
tar -C /tmp -czf $OUT/bench-records.tgz rec
