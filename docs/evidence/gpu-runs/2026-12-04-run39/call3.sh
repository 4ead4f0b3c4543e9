#!/usr/bin/env bash
# GPU run 39, call 3 (issues 55, 56): with compile ahead (on by default), each from a fresh Triton cache: logits
# glm-5.2 8 layers 2048,4096,8192, firsttoken ref-gpu heldout50 (cold, warm), the sweep ref-gpu 1024..32768; then the
# tree of the day issue 55 was filed (fc20ae8, exported from git, its fixtures/ linked to today's trained models) on
# firsttoken and logits in this same call; last, layer0 twice with bytecode allowed (it leaves bytecode behind).
set -uo pipefail
start=$(date +%s); left() { echo $(( start + ${BUDGET:-575} - $(date +%s) )); }
root=$PWD
source scripts/gpu_env.sh
mkdir -p $OUT/t
git log --oneline -1 > $OUT/t/commit.txt 2>/dev/null
python3 -c "import torch, transformers, triton"
for step in logits firsttoken; do STEPS=$step LIMIT=150 bash scripts/gpu_time_to_verdict.sh $OUT/t/new; done
export TRITON_CACHE_DIR=$(mktemp -d)
s=$(date +%s%N)
timeout 120 python3 -m glmcheck sweep --model ref-gpu --tokens 1024..32768 --quiet --profile \
  --overwrite --out $OUT/t/new/rec-sweep > $OUT/t/new/sweep.txt 2> $OUT/t/new/sweep.err
echo "=== sweep cold: rc $?, $(( ($(date +%s%N) - s) / 1000000 )) ms"; grep -E "^verdict" $OUT/t/new/sweep.txt
sed -n '/where the time went/,$p' $OUT/t/new/sweep.err
echo "=== old tree after $(( $(date +%s) - start )) s, $(left) s left"
rm -rf /tmp/old && mkdir -p /tmp/old/fixtures && git archive fc20ae8 glmcheck prompts | tar -x -C /tmp/old
models=$(dirname "$(dirname "$(find $root/glmcheck -path '*ref-gpu/config.json' | head -1)")")
for m in $models/*; do ln -s $m /tmp/old/fixtures/$(basename $m); done
ls -l /tmp/old/fixtures
for step in firsttoken logits; do
  [ $(left) -gt 60 ] && STEPS=$step LIMIT=$(( $(left) - 20 )) bash scripts/gpu_time_to_verdict.sh $OUT/t/old /tmp/old
done
[ $(left) -gt 50 ] && STEPS=bytecode bash scripts/gpu_time_to_verdict.sh $OUT/t/new
echo "=== done after $(( $(date +%s) - start )) s"
cd $OUT && tar czf t.tgz t && rm -rf t
