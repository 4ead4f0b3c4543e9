#!/usr/bin/env bash
# GPU run 40, call 3 (issues 55, 56): the indexer's scores as one GEMM and the precompile child. GPU tests of both
# (and compile ahead's), then on one machine, each "cold" from a fresh Triton cache: layer0 glm-5.2 tp 8 with the
# child (the default), without it (GLMCHECK_PRECOMPILE=0), then warm; the sweep ref-gpu 1024..32768 cold and warm;
# logits glm-5.2 8 layers 2048,4096,8192 cold.
set -uo pipefail
export PYTHONPATH=$PWD
source scripts/gpu_env.sh
mkdir -p $OUT/t
git log --oneline -1 > $OUT/t/commit.txt 2>/dev/null
python3 -c "import torch, transformers, triton; print(torch.__version__, triton.__version__, transformers.__version__)"
s=$(date +%s)
timeout 200 python3 -m pytest -q -m gpu tests/test_precompile.py tests/test_long_context.py tests/test_compile_ahead.py \
  -p no:cacheprovider > $OUT/t/pytest-gpu.txt 2>&1
echo "=== gpu tests rc $?, $(( $(date +%s) - s )) s"; tail -3 $OUT/t/pytest-gpu.txt
wall() {  # NAME CACHE ARGS...
  local name=$1 cache=$2; shift 2; local s=$(date +%s%N)
  TRITON_CACHE_DIR=$cache timeout 150 python3 -m glmcheck "$@" --quiet --overwrite --profile --out $OUT/t/rec-$name \
    > $OUT/t/$name.txt 2> $OUT/t/$name.err
  echo "| $name | $(( ($(date +%s%N) - s) / 1000000 )) ms | rc $? | $(grep -E '^verdict' $OUT/t/$name.txt | head -1)"
  grep -E "^(imports|build|compile|compile ahead|forwards|total) " $OUT/t/$name.err | tr -s ' ' | paste -sd ';'
}
L0=(layer0 --model glm-5.2 --tp 8 --tokens 4096)
c1=$(mktemp -d); c2=$(mktemp -d); c3=$(mktemp -d); c4=$(mktemp -d)
wall layer0-cold $c1 "${L0[@]}"
GLMCHECK_PRECOMPILE=0 wall layer0-cold-nochild $c2 "${L0[@]}"
wall layer0-warm $c1 "${L0[@]}"
wall layer0-warm2 $c1 "${L0[@]}"
wall sweep-cold $c3 sweep --model ref-gpu --tokens 1024..32768
wall sweep-warm $c3 sweep --model ref-gpu --tokens 1024..32768
wall logits-cold $c4 logits --model glm-5.2 --layers 8 --experts 16 --tp 8 --tokens 2048,4096,8192
echo "=== done after $(( $(date +%s) - s )) s"
cd $OUT && tar czf t.tgz t && rm -rf t
