#!/usr/bin/env bash
# GPU run 38, call 3 (issues 55, 56): firsttoken cold and warm after the marks build's do_not_specialize (d1a3aaf),
# then the sweep with the first-bin rerun, band of 4 and of 8, each with its phase table.
set -uo pipefail
source scripts/gpu_env.sh
git log --oneline -1 > $OUT/commit.txt 2>/dev/null
STEPS=firsttoken bash scripts/gpu_time_to_verdict.sh $OUT/t
for band in 4 8; do
  s=$(date +%s%N)
  python3 -m glmcheck sweep --model ref-gpu --tokens 1024..32768 --band $band --quiet --profile --overwrite \
    --out $OUT/rec-sweep-band$band > $OUT/sweep-band$band.txt 2> $OUT/sweep-band$band.err
  echo "=== sweep band $band: rc $?, $(( ($(date +%s%N) - s) / 1000000 )) ms"
  grep -E "^\| (triton|flashmla)|^verdict" $OUT/sweep-band$band.txt | tail -n 6; sed -n '/where the time went/,$p' $OUT/sweep-band$band.err
done
