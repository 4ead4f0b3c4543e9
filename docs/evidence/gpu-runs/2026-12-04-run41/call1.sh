#!/usr/bin/env bash
# GPU run 41, call 1 (issue 56): per-position KL on ref-gpu at 32768 tokens, seeds 100 on, 4 seeds a file, the same
# rows as GPU run 38's call 2 (band:0..11, the kernel under test and its unions, FlashMLA, four faults: one from
# position 5000 on, neighbour rows 1 in 64, the last slot dropped, a future row 1 in 64). Seeds 100-115 are run 38's
# (the data a run-forgiving count is designed on); later seeds are fresh, to judge it.
set -uo pipefail
start=$(date +%s); deadline=$(( start + ${BUDGET:-560} ))
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
source scripts/gpu_env.sh
git log --oneline -1 > $OUT/commit.txt 2>/dev/null
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/commit.txt
python3 -c "import torch, transformers, triton; print(torch.__version__, triton.__version__, transformers.__version__)" >> $OUT/commit.txt
seed=${FIRST_SEED:-100}; files=0
while [ $(( deadline - $(date +%s) )) -gt 100 ] && [ $files -lt 6 ]; do
  timeout $(( deadline - $(date +%s) - 5 )) python3 scripts/position_kl.py $OUT/kl-32k-$seed.pt --model ref-gpu \
    --tokens 32768 --seeds 4 --first-seed $seed --band 12 --compact --late-start 5000 --extra flashmla_sparse \
    --faults late,fault:neighbour_1in64,fault:last_slot_dropped,fault:future_row_1in64 >> $OUT/kl.txt 2>&1
  rc=$?; echo "=== seeds $seed..: rc $rc after $(( $(date +%s) - start )) s"; tail -n 4 $OUT/kl.txt
  files=$(( files + 1 ))
  [ $rc = 0 ] || break
  seed=$(( seed + 4 ))
done
ls -la $OUT
