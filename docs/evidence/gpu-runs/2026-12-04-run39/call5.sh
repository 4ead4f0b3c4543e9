#!/usr/bin/env bash
# GPU run 39, call 5 (issue 55): the GPU contract matrix (two shards) beside the kernel-side GPU tests and compile
# ahead's (d1a3aaf's do_not_specialize had not met the matrix on the GPU); then, alone on the machine, firsttoken
# ref-gpu heldout50 cold with the reference's forwards over every prompt first (one compile ahead for all prompt
# shapes), the issue-day tree (fc20ae8) first, each from a fresh Triton cache.
set -uo pipefail
start=$(date +%s)
root=$PWD
export PYTHONPATH=$PWD
source scripts/gpu_env.sh
mkdir -p $OUT/t
git log --oneline -1 > $OUT/t/commit.txt 2>/dev/null
PY="python3 -m pytest -q -rfE -p no:cacheprovider"
for i in 0 1; do
  ( GLMCHECK_MATRIX_SHARD=$i/2 GLMCHECK_MATRIX_LOG=$OUT/t/matrix-$i.md timeout 200 \
      $PY -m gpu tests/test_contract_matrix.py > $OUT/t/pytest-matrix-$i.txt 2>&1; echo "exit $?" >> $OUT/t/pytest-matrix-$i.txt ) &
done
( timeout 200 $PY -m "gpu or not gpu" tests/test_compile_ahead.py tests/test_union_marks.py tests/test_per_token.py \
    tests/test_launch_variants.py > $OUT/t/pytest-gpu.txt 2>&1; echo "exit $?" >> $OUT/t/pytest-gpu.txt ) &
wait
echo "=== tests done after $(( $(date +%s) - start )) s"
for f in $OUT/t/pytest-*.txt; do echo "== $f"; tail -n 3 $f; done
rm -rf /tmp/old && mkdir -p /tmp/old/fixtures && git archive fc20ae8 glmcheck prompts | tar -x -C /tmp/old
models=$(dirname "$(dirname "$(find $root/glmcheck -path '*ref-gpu/config.json' | head -1)")")
for m in $models/*; do ln -s $m /tmp/old/fixtures/$(basename $m); done
unset PYTHONPATH; source scripts/gpu_env.sh
wall() {  # NAME TREE ARGS...
  local name=$1 tree=$2; shift 2; local s=$(date +%s%N)
  (cd $tree && TRITON_CACHE_DIR=$(mktemp -d) timeout 110 python3 -m glmcheck "$@" --quiet --overwrite --out $OUT/t/rec-$name \
    > $OUT/t/$name.txt 2> $OUT/t/$name.err)
  echo "| $name | $(( ($(date +%s%N) - s) / 1000000 )) ms | rc $? | $(grep -E '^verdict' $OUT/t/$name.txt | head -1)"
}
FT=(firsttoken --model ref-gpu --prompts heldout50)
wall firsttoken-old /tmp/old "${FT[@]}"
wall firsttoken-new $root "${FT[@]}" --profile
sed -n '/where the time went/,$p' $OUT/t/firsttoken-new.err
echo "=== done after $(( $(date +%s) - start )) s"
cd $OUT && tar czf t.tgz t && rm -rf t
