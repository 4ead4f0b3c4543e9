#!/usr/bin/env bash
# GPU run 40, call 4 (issues 55, 56): firsttoken ref-gpu heldout50 from a fresh Triton cache: the issue-day tree
# fc20ae8, today's with the precompile child (the default), today's without it, then today's warm; the sweep ref-gpu
# 1024..32768 cold once more; last, the GPU tests but the contract matrix (kernels unchanged since its last run).
set -uo pipefail
export PYTHONPATH=$PWD
source scripts/gpu_env.sh
mkdir -p $OUT/t
git log --oneline -1 > $OUT/t/commit.txt 2>/dev/null
python3 -c "import torch, transformers, triton; print(torch.__version__, triton.__version__, transformers.__version__)"
s=$(date +%s); root=$PWD
rm -rf /tmp/old && mkdir -p /tmp/old/fixtures && git archive fc20ae8 glmcheck prompts | tar -x -C /tmp/old
models=$(dirname "$(dirname "$(find $root/glmcheck -path '*ref-gpu/config.json' | head -1)")")
for m in $models/*; do ln -s $m /tmp/old/fixtures/$(basename $m); done
wall() {  # NAME TREE CACHE ARGS...
  local name=$1 tree=$2 cache=$3; shift 3; local t=$(date +%s%N)
  (cd $tree && TRITON_CACHE_DIR=$cache timeout 170 python3 -m glmcheck "$@" --quiet --overwrite --out $OUT/t/rec-$name \
    > $OUT/t/$name.txt 2> $OUT/t/$name.err)
  echo "| $name | $(( ($(date +%s%N) - t) / 1000000 )) ms | rc $? | $(grep -E '^verdict' $OUT/t/$name.txt | head -1)"
  grep -E "^(imports|build|compile|compile ahead|forwards|total) " $OUT/t/$name.err | tr -s ' ' | paste -sd ';'
}
FT=(firsttoken --model ref-gpu --prompts heldout50)
wall firsttoken-old /tmp/old $(mktemp -d) "${FT[@]}"
new=$(mktemp -d)
wall firsttoken-new $root $new "${FT[@]}" --profile
GLMCHECK_PRECOMPILE=0 wall firsttoken-new-nochild $root $(mktemp -d) "${FT[@]}" --profile
wall firsttoken-new-warm $root $new "${FT[@]}" --profile
wall sweep-cold $root $(mktemp -d) sweep --model ref-gpu --tokens 1024..32768 --profile
echo "=== timings done after $(( $(date +%s) - s )) s"
timeout 230 python3 -m pytest -q -m gpu --ignore=tests/test_contract_matrix.py -p no:cacheprovider -x \
  > $OUT/t/pytest-gpu.txt 2>&1
echo "=== gpu tests rc $?, after $(( $(date +%s) - s )) s"; tail -4 $OUT/t/pytest-gpu.txt
cd $OUT && find t -name items -type d -exec rm -rf {} + ; tar czf t.tgz t && rm -rf t
