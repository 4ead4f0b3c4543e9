#!/usr/bin/env bash
# GPU run 41, call 2 (issues 55, 56). Issue 55: the fast exit (no interpreter teardown) and GLMCHECK_PYCACHE=1 (the
# opt-in private bytecode cache under the image's PYTHONDONTWRITEBYTECODE=1). On one Triton cache warmed by a cold
# run: layer0 glm-5.2 tp 8 warm, this tree and ac81d73 (before both) in alternating rounds; then with
# GLMCHECK_PYCACHE=1 (a first run fills the cache, two warm); the sweep ref-gpu 1024..32768 cold (fresh Triton
# cache) with and without the opt-in. Issue 56: per-position KL at 32768 tokens on fresh seeds (116 on, call 1's
# rows) with the rest of the budget, and the sweep gate's rates over them (band of 8).
set -uo pipefail
start=$(date +%s); deadline=$(( start + ${BUDGET:-545} ))
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
source scripts/gpu_env.sh
mkdir -p $OUT/t
{ git log --oneline -1; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, transformers, triton; print(torch.__version__, triton.__version__, transformers.__version__)"
  env | grep -E "^PYTHON"; } > $OUT/t/commit.txt 2>&1
mkdir -p /tmp/old && git archive ac81d73 glmcheck | tar -x -C /tmp/old
wall() {  # NAME TREE ARGS...: python3 -m glmcheck ARGS run from TREE (its package imported), timed
  local name=$1 tree=$2; shift 2; local s=$(date +%s%N) rc
  (cd $tree && timeout 150 python3 -m glmcheck "$@" --quiet --overwrite --profile --out $OUT/t/rec-$name \
    > $OUT/t/$name.txt 2> $OUT/t/$name.err); rc=$?
  echo "| $name | $(( ($(date +%s%N) - s) / 1000000 )) ms | rc $rc | $(grep -E '^verdict' $OUT/t/$name.txt | head -1) |" \
    "$(grep -E '^(imports|compile ahead|forwards|total) ' $OUT/t/$name.err | tr -s ' ' | paste -sd ';')"
}
export TRITON_CACHE_DIR=$(mktemp -d) XDG_CACHE_HOME=$(mktemp -d)
timeout 150 python3 -m pytest -q -m gpu tests/test_precompile.py -p no:cacheprovider > $OUT/t/pytest-gpu.txt 2>&1
echo "=== precompile GPU test rc $? after $(( $(date +%s) - start )) s"; tail -1 $OUT/t/pytest-gpu.txt
L0=(layer0 --model glm-5.2 --tp 8 --tokens 4096)
wall l0-cold . "${L0[@]}"
for r in 1 2; do wall l0-new-$r . "${L0[@]}"; wall l0-old-$r /tmp/old "${L0[@]}"; done
GLMCHECK_PYCACHE=1 wall l0-pyc-first . "${L0[@]}"
for r in 1 2; do GLMCHECK_PYCACHE=1 wall l0-pyc-$r . "${L0[@]}"; done
echo "pycache: $(find $XDG_CACHE_HOME -name '*.pyc' | wc -l) files"
SW=(sweep --model ref-gpu --tokens 1024..32768)
GLMCHECK_PYCACHE=1 TRITON_CACHE_DIR=$(mktemp -d) wall sweep-pyc-cold . "${SW[@]}"
TRITON_CACHE_DIR=$(mktemp -d) wall sweep-cold . "${SW[@]}"
echo "=== timings done after $(( $(date +%s) - start )) s"
(cd $OUT && find t -path '*rec-*' -name items -prune -exec rm -rf {} + ; tar czf t.tgz t && rm -rf t)
seed=${FIRST_SEED:-116}; files=0
while [ $(( deadline - $(date +%s) )) -gt 80 ] && [ $files -lt 3 ]; do
  timeout $(( deadline - $(date +%s) - 15 )) python3 scripts/position_kl.py $OUT/kl-32k-$seed.pt --model ref-gpu \
    --tokens 32768 --seeds 4 --first-seed $seed --band 12 --compact --late-start 5000 --extra flashmla_sparse \
    --faults late,fault:neighbour_1in64,fault:last_slot_dropped,fault:future_row_1in64 >> $OUT/kl.txt 2>&1
  rc=$?; echo "=== seeds $seed..: rc $rc after $(( $(date +%s) - start )) s"
  files=$(( files + 1 )); [ $rc = 0 ] || break; seed=$(( seed + 4 ))
done
ls $OUT/kl-32k-*.pt > /dev/null 2>&1 && python3 scripts/position_gate_rates.py $OUT/kl-32k-*.pt --band 8 \
  --bins 1024,2048,4096,8192,16384,32768 > $OUT/gates.txt 2>&1 && sed -n '/the sweep as a whole/,$p' $OUT/gates.txt
ls -la $OUT
