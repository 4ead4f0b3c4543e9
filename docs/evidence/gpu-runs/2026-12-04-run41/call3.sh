#!/usr/bin/env bash
# GPU run 41, call 3 (issue 56): the sweep command itself on fresh prompt seeds (200-202; default rows, band of 8),
# then per-position KL at 32768 tokens on more fresh seeds (128 on, call 1's rows) and the sweep gate's rates over them.
set -uo pipefail
start=$(date +%s); deadline=$(( start + ${BUDGET:-540} ))
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
source scripts/gpu_env.sh
export GLMCHECK_PYCACHE=1 XDG_CACHE_HOME=$(mktemp -d)
mkdir -p $OUT/s
for seed in 200 201 202; do
  s=$(date +%s%N)
  timeout 120 python3 -m glmcheck sweep --model ref-gpu --tokens 1024..32768 --seed $seed --quiet --overwrite \
    --out $OUT/s/rec-$seed > $OUT/s/sweep-$seed.txt 2>&1
  echo "| sweep seed $seed | $(( ($(date +%s%N) - s) / 1000000 )) ms | rc $? | $(grep -E '^verdict' $OUT/s/sweep-$seed.txt | head -1)"
done
(cd $OUT && find s -name items -prune -exec rm -rf {} + ; tar czf s.tgz s && rm -rf s)
seed=${FIRST_SEED:-128}; files=0
while [ $(( deadline - $(date +%s) )) -gt 80 ] && [ $files -lt 4 ]; do
  timeout $(( deadline - $(date +%s) - 15 )) python3 scripts/position_kl.py $OUT/kl-32k-$seed.pt --model ref-gpu \
    --tokens 32768 --seeds 4 --first-seed $seed --band 12 --compact --late-start 5000 --extra flashmla_sparse \
    --faults late,fault:neighbour_1in64,fault:last_slot_dropped,fault:future_row_1in64 >> $OUT/kl.txt 2>&1
  rc=$?; echo "=== seeds $seed..: rc $rc after $(( $(date +%s) - start )) s"
  files=$(( files + 1 )); [ $rc = 0 ] || break; seed=$(( seed + 4 ))
done
ls $OUT/kl-32k-*.pt > /dev/null 2>&1 && python3 scripts/position_gate_rates.py $OUT/kl-32k-*.pt --band 8 \
  --bins 1024,2048,4096,8192,16384,32768 > $OUT/gates.txt 2>&1 && sed -n '/the sweep as a whole/,$p' $OUT/gates.txt
ls -la $OUT
