#!/usr/bin/env bash
# GPU run 38, call 2 (issue 56): per-position KL on ref-gpu at 32768 tokens over fresh seeds (100 on), 4 seeds a
# file: band:0..11 (a band of 4 or 8, the rest held out as legitimate rows), the kernel under test and its unions,
# FlashMLA, and four faults (one from position 5000 on, neighbour rows 1 in 64, the last slot dropped, a future row
# 1 in 64). For the sweep's gate: limits set on one half of the seeds, judged on the other (CPU).
set -uo pipefail
start=$(date +%s); deadline=$(( start + ${BUDGET:-575} ))
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
source scripts/gpu_env.sh
git log --oneline -1 > $OUT/commit.txt 2>/dev/null
seed=${FIRST_SEED:-100}
while [ $(( deadline - $(date +%s) )) -gt 90 ]; do
  timeout $(( deadline - $(date +%s) - 5 )) python3 scripts/position_kl.py $OUT/kl-32k-$seed.pt --model ref-gpu \
    --tokens 32768 --seeds 4 --first-seed $seed --band 12 --compact --late-start 5000 --extra flashmla_sparse \
    --faults late,fault:neighbour_1in64,fault:last_slot_dropped,fault:future_row_1in64 >> $OUT/kl.txt 2>&1
  rc=$?; echo "=== seeds $seed..: rc $rc after $(( $(date +%s) - start )) s"; tail -n 4 $OUT/kl.txt
  [ $rc = 0 ] || break
  seed=$(( seed + 4 ))
done
ls -la $OUT
