#!/usr/bin/env bash
# GPU run 37, call 3 (timed; nothing else on the GPU): layer0 over the FP8 pool (glm-5.2 tp 8 and ref-gpu, 4096
# tokens); firsttoken ref-gpu heldout50 cold then warm with one loop size for every top-k; logits over the FP8 pool
# (glm-5.2 8 layers 2048,4096,8192: the seed's table (b) columns; ref-gpu-fp8 at 4096); then, if time is left,
# firsttoken cold with the launch sizes as before (kernel-sizes.patch reversed) in the same call. Carry .whl, .flashmla.
set -uo pipefail
start=$(date +%s); deadline=$(( start + ${BUDGET:-570} )); left() { echo $(( deadline - $(date +%s) )); }
here=$PWD/docs/evidence/gpu-runs/2026-12-04-run37
source scripts/gpu_env.sh
STEPS=layer0 bash scripts/gpu_fp8.sh $OUT/fp8
echo "=== layer0 fp8 after $(( $(date +%s) - start )) s"
STEPS=firsttoken LIMIT=120 bash scripts/gpu_time_to_verdict.sh $OUT/ttv | grep -E "^\| |^imports|^forwards|^total|^compile"
echo "=== firsttoken after $(( $(date +%s) - start )) s"
wall() { local name=$1; shift; local s=$(date +%s%N)
  timeout $(( $(left) - 10 )) python3 -m glmcheck "$@" --quiet --overwrite --format wide --profile --out $OUT/fp8/rec-$name \
    > $OUT/fp8/$name.txt 2>&1
  echo "=== $name: rc $?, $(( ($(date +%s%N) - s) / 1000000 )) ms after $(( $(date +%s) - start )) s"
  grep -E "^verdict|^\| (band|triton|flashmla|hf|rerun)" $OUT/fp8/$name.txt | head -n 24; }
wall logits-glm52-fp8 logits --model glm-5.2 --layers 8 --experts 16 --tp 8 --tokens 2048,4096,8192 --kv-cache-dtype fp8_e4m3
wall logits-refgpufp8-fp8 logits --model ref-gpu-fp8 --tokens 4096 --kv-cache-dtype fp8_e4m3
if [ $(left) -gt 100 ]; then
  rm -rf /tmp/old && mkdir /tmp/old && cp -r glmcheck scripts /tmp/old/ && (cd /tmp/old && patch -s -R -p1 < $here/kernel-sizes.patch) && \
    STEPS=firsttoken LIMIT=$(( $(left) - 10 )) bash scripts/gpu_time_to_verdict.sh $OUT/ttv /tmp/old | \
      grep -E "^\| |^imports|^forwards|^total|^compile"
fi
echo "=== done after $(( $(date +%s) - start )) s"
cd $OUT && tar -czf results.tgz fp8 ttv && rm -rf fp8 ttv
