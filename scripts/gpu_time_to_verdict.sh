#!/usr/bin/env bash
# Time to verdict on the GPU (issue 55): the three commands the issue times, each as a new user runs it, with wall
# time; `layer0` from a cold Triton cache, then warm. With TREES="a b" (folders holding a glmcheck package, e.g. a
# checkout of the revision before a change and this one) every tree runs them in turn, in one call, each from a cold
# cache; PROFILE=1 adds a cProfile of the warm layer0 (top entries by own and cumulative time) per tree.
#   bash scripts/gpu_time_to_verdict.sh OUTDIR
# Records go under OUTDIR/<tree>/; `diff_records` at the end compares the layer0 records of the first two trees.
set -uo pipefail
out=${1:?usage: gpu_time_to_verdict.sh OUTDIR}
mkdir -p "$out"
unset TRITON_INTERPRET
export PYTHONUNBUFFERED=1
[ -f .flashmla/_flashmla_C.abi3.so ] && export GLMCHECK_FLASHMLA_LIB=$PWD/.flashmla/_flashmla_C.abi3.so
if [ -d .whl ]; then
  [ -d /tmp/site/datasets ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
  extra=/tmp/site
fi
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__,
  'transformers', transformers.__version__)"; } > "$out/versions.txt" 2>&1
cat "$out/versions.txt"
wall() {  # STEP COMMAND...: run COMMAND (a glmcheck command line after `python3 -m glmcheck`, or a whole one) timed
  local step=$1; shift; local start rc; start=$(date +%s%N)
  if [ "$1" = timeout ]; then "$@" > "$dir/$step.txt" 2>&1; else python3 -m glmcheck "$@" > "$dir/$step.txt" 2>&1; fi
  rc=$?
  echo "| $name | $step | $(( ($(date +%s%N) - start) / 1000000 )) ms | rc $rc |"
  grep -E "^verdict" "$dir/$step.txt" | head -1
}
for tree in ${TREES:-.}; do
  name=$(basename "$(cd "$tree" && pwd)"); dir=$out/$name; mkdir -p "$dir"
  export PYTHONPATH=$(cd "$tree" && pwd)${extra:+:$extra}
  export TRITON_CACHE_DIR=$(mktemp -d)
  python3 -c "import glmcheck, sys; print('tree', '$tree', glmcheck.__file__)"
  L0=(layer0 --model glm-5.2 --tp 8 --tokens 4096 --quiet --overwrite)
  wall layer0-cold "${L0[@]}" --out "$dir/rec-layer0-cold"
  if [ "${PROFILE:-0}" = 1 ]; then  # the warm run under cProfile (its own overhead is a few per cent)
    start=$(date +%s%N)
    python3 -m cProfile -o "$dir/layer0.prof" -m glmcheck "${L0[@]}" --out "$dir/rec-layer0" > "$dir/layer0-warm.txt" 2>&1
    echo "| $name | layer0-warm (cProfile) | $(( ($(date +%s%N) - start) / 1000000 )) ms |"
    python3 -c "
import pstats
s = pstats.Stats('$dir/layer0.prof', stream=open('$dir/layer0-profile.txt', 'w'))
s.sort_stats('cumulative').print_stats(70); s.sort_stats('tottime').print_stats(45)"
  else
    wall layer0-warm "${L0[@]}" --out "$dir/rec-layer0"
  fi
  wall logits timeout ${LIMIT:-170} python3 -m glmcheck logits --model glm-5.2 --layers 8 --experts 16 --tp 8 \
    --tokens 2048,4096,8192 --quiet --overwrite --out "$dir/rec-logits"
  wall firsttoken timeout ${LIMIT:-170} python3 -m glmcheck firsttoken --model ref-gpu --prompts heldout50 --quiet \
    --overwrite --out "$dir/rec-firsttoken"
done
