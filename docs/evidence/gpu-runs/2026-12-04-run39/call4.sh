#!/usr/bin/env bash
# GPU run 39, call 4 (issue 55): call 3's old-tree step again without --profile (fc20ae8 has no such flag):
# firsttoken ref-gpu heldout50 cold and logits glm-5.2 8 layers 2048,4096,8192 cold, the issue-day tree then today's,
# each from a fresh Triton cache, in this one call.
set -uo pipefail
root=$PWD
source scripts/gpu_env.sh
mkdir -p $OUT/t
git log --oneline -1 > $OUT/t/commit.txt 2>/dev/null
python3 -c "import torch, transformers, triton"
rm -rf /tmp/old && mkdir -p /tmp/old/fixtures && git archive fc20ae8 glmcheck prompts | tar -x -C /tmp/old
models=$(dirname "$(dirname "$(find $root/glmcheck -path '*ref-gpu/config.json' | head -1)")")
for m in $models/*; do ln -s $m /tmp/old/fixtures/$(basename $m); done
wall() {  # NAME TREE ARGS...
  local name=$1 tree=$2; shift 2; local s=$(date +%s%N)
  (cd $tree && TRITON_CACHE_DIR=$(mktemp -d) timeout 200 python3 -m glmcheck "$@" --quiet --overwrite --out $OUT/t/rec-$name \
    > $OUT/t/$name.txt 2> $OUT/t/$name.err)
  echo "| $name | $(( ($(date +%s%N) - s) / 1000000 )) ms | rc $? | $(grep -E '^verdict' $OUT/t/$name.txt | head -1)"
}
FT=(firsttoken --model ref-gpu --prompts heldout50)
LG=(logits --model glm-5.2 --layers 8 --experts 16 --tp 8 --tokens 2048,4096,8192)
wall firsttoken-old /tmp/old "${FT[@]}"
wall firsttoken-new $root "${FT[@]}"
wall logits-old /tmp/old "${LG[@]}"
wall logits-new $root "${LG[@]}"
cd $OUT && tar czf t.tgz t && rm -rf t
