#!/usr/bin/env bash
# GPU run 40, call 1 (issues 55, 56): where one sweep-row forward's time goes (ref-gpu, 32768 tokens, every
# position's logits kept: the exact reference, a band variant, the union-of-8 kernel), then firsttoken ref-gpu
# heldout50 from a fresh Triton cache: the issue-day tree fc20ae8 and today's, in this one call (today's warm too).
set -uo pipefail
export PYTHONPATH=$PWD
source scripts/gpu_env.sh
mkdir -p $OUT/t
git log --oneline -1 > $OUT/t/commit.txt 2>/dev/null
python3 -c "import torch, transformers, triton; print(torch.__version__, triton.__version__, transformers.__version__)"
s=$(date +%s)
timeout 150 python3 scripts/gpu_profile_forward.py --model ref-gpu --tokens 32768 \
  --backends reference,band:0,triton_sparse_mla:union8 > $OUT/t/profile.txt 2> $OUT/t/profile.err
echo "=== profile rc $?, $(( $(date +%s) - s )) s"; grep "^===" $OUT/t/profile.txt
root=$PWD
rm -rf /tmp/old && mkdir -p /tmp/old/fixtures && git archive fc20ae8 glmcheck prompts | tar -x -C /tmp/old
models=$(dirname "$(dirname "$(find $root/glmcheck -path '*ref-gpu/config.json' | head -1)")")
for m in $models/*; do ln -s $m /tmp/old/fixtures/$(basename $m); done
wall() {  # NAME TREE CACHE ARGS...
  local name=$1 tree=$2 cache=$3; shift 3; local s=$(date +%s%N)
  (cd $tree && TRITON_CACHE_DIR=$cache timeout 170 python3 -m glmcheck "$@" --quiet --overwrite --out $OUT/t/rec-$name \
    > $OUT/t/$name.txt 2> $OUT/t/$name.err)
  echo "| $name | $(( ($(date +%s%N) - s) / 1000000 )) ms | rc $? | $(grep -E '^verdict' $OUT/t/$name.txt | head -1)"
}
FT=(firsttoken --model ref-gpu --prompts heldout50)
wall firsttoken-old /tmp/old $(mktemp -d) "${FT[@]}"
new=$(mktemp -d)
wall firsttoken-new $root $new "${FT[@]}" --profile
wall firsttoken-new-warm $root $new "${FT[@]}" --profile
for f in firsttoken-new firsttoken-new-warm; do sed -n '/where the time went/,$p' $OUT/t/$f.err; done
cd $OUT && tar czf t.tgz t && rm -rf t
