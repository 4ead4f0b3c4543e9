#!/usr/bin/env bash
# GPU run 37, call 4 (issue 56): (1) the fp32 reference's two forms timed, same call: the ref-gpu sweep 1024..32768
# and logits glm-5.2 8 layers 2048,4096,8192 with GLMCHECK_REFERENCE_IMPL=triton then torch (records kept, to diff);
# (2) the one-forward sweep (default rows) over fresh held-out seeds 20, 21, ... in the time left: the correct
# kernels' PASS rate on seeds no gate was tuned on. Carry .whl and .flashmla.
set -uo pipefail
start=$(date +%s); deadline=$(( start + ${BUDGET:-${LIMIT:-480}} )); left() { echo $(( deadline - $(date +%s) )); }
source scripts/gpu_env.sh
mkdir -p $OUT/r
for step in sweep logits; do
  case $step in
    sweep) cmd=(sweep --model ref-gpu --tokens 1024..32768) ;;
    logits) cmd=(logits --model glm-5.2 --layers 8 --experts 16 --tp 8 --tokens 2048,4096,8192) ;;
  esac
  for form in triton torch; do
    s=$(date +%s%N)
    GLMCHECK_REFERENCE_IMPL=$form timeout 200 python3 -m glmcheck "${cmd[@]}" --quiet --overwrite --profile \
      --out $OUT/r/rec-$step-ref-$form > $OUT/r/$step-ref-$form.txt 2>&1
    echo "=== $step, reference form $form: rc $?, $(( ($(date +%s%N) - s) / 1000000 )) ms"
    grep -E "^verdict|^total|^forwards|^compile" $OUT/r/$step-ref-$form.txt
  done
done
echo "=== reference forms after $(( $(date +%s) - start )) s"
seed=20
while [ $(left) -gt 45 ]; do
  s=$(date +%s%N)
  timeout $(( $(left) - 5 )) python3 -m glmcheck sweep --model ref-gpu --tokens 1024..32768 --seed $seed --quiet \
    --overwrite --out $OUT/r/rec-sweep-seed$seed > $OUT/r/sweep-seed$seed.txt 2>&1
  echo "=== sweep seed $seed: rc $?, $(( ($(date +%s%N) - s) / 1000000 )) ms"
  grep -E "^verdict" $OUT/r/sweep-seed$seed.txt
  seed=$(( seed + 1 ))
done
echo "=== done after $(( $(date +%s) - start )) s"
cd $OUT && tar -czf r.tgz r && rm -rf r
