#!/usr/bin/env bash
# Every position of one forward on the GPU (issue 56; docs/reliability.md, "All-position logits"): the per-position
# KL data of ref-gpu at 4096 tokens over seeds (scripts/position_kl.py, saved after each seed), then the all-position
# logits check and the one-forward length sweep with their wall time and phase tables.
#   bash scripts/gpu_positions.sh OUTDIR
# SEEDS (default 10), FIRST_SEED (default 0), POWER, SWEEP_SEEDS (below), KL_LIMIT (s, default 300: the seeds finished by then are kept), SWEEP (default 1024..32768).
set -uo pipefail
out=$(mkdir -p "${1:?usage: gpu_positions.sh OUTDIR}" && cd "$1" && pwd)
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
source scripts/gpu_env.sh
gpu_versions "$out/versions.txt"
wall() {  # NAME CMD...: timed, output to OUTDIR/NAME.txt
  local name=$1; shift; local start rc; start=$(date +%s%N)
  "$@" > "$out/$name.txt" 2>&1; rc=$?
  echo "=== $name: $(( ($(date +%s%N) - start) / 1000000 )) ms, rc $rc"
}
wall kl timeout "${KL_LIMIT:-300}" python3 scripts/position_kl.py "$out/kl-ref-gpu-4096.pt" --model ref-gpu \
  --tokens 4096 --seeds "${SEEDS:-10}" --first-seed "${FIRST_SEED:-0}" --band 8
tail -n 12 "$out/kl.txt"
# the kernel under test, its unions, FlashMLA, and a fault from position 5000 on (its onset belongs in the 8192 bin)
late=late5000=tests/support/late_fault.py:late_fault_5000
wall sweep python3 -m glmcheck sweep --model ref-gpu --tokens "${SWEEP:-1024..32768}" --quiet --profile \
  --backends "triton_sparse_mla,triton_sparse_mla:union2,triton_sparse_mla:union4,triton_sparse_mla:union8,flashmla_sparse,$late" \
  --out "$out/rec-sweep"
grep -vE "^\|-" "$out/sweep.txt" | tail -n 40
wall logits python3 -m glmcheck logits --model ref-gpu --tokens 4096 --quiet --profile --out "$out/rec-logits"
grep -E "^\||^verdict|total|forwards" "$out/logits.txt" | head -n 16
# Optional, for the next measurements of issue 56: POWER=1 the power curves on ref-gpu (layer0 and logits, 20 seeds
# at 4096 tokens), SWEEP_SEEDS=N the one-forward sweep over N more seeds (its long bins' false alarms).
if [ "${POWER:-0}" = 1 ]; then
  wall power python3 -m glmcheck selftest --power --model ref-gpu --seeds "${POWER_SEEDS:-20}" --tokens 4096 --quiet
  tail -n 14 "$out/power.txt"
fi
for seed in $(seq 1 "${SWEEP_SEEDS:-0}"); do
  wall "sweep-seed$seed" python3 -m glmcheck sweep --model ref-gpu --tokens "${SWEEP:-1024..32768}" --seed "$seed" \
    --quiet --out "$out/rec-sweep-seed$seed"
  grep -E "^\| triton|^\| flashmla" "$out/sweep-seed$seed.txt" | tail -n 5
done
gpu_pack "$out"
