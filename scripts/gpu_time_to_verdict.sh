#!/usr/bin/env bash
# Time to verdict on the GPU (issue 55; docs/performance.md, "Time to verdict"): the commands the issue times, as a
# new user runs them, each with its wall time and its --profile phase table; layer0 from a cold Triton cache, then
# twice warm (the second also reads any bytecode the first cached: `glmcheck.bytecode`).
#   bash scripts/gpu_time_to_verdict.sh OUTDIR [TREE]
# TREE (default .): a folder holding a glmcheck package to run instead of this checkout's (e.g. an export of an
# earlier revision with a `fixtures` link to this one's); it runs from there, so its package is the one imported.
# PROFILE=1 adds a cProfile of a warm layer0; STEPS picks steps (default "layer0 firsttoken logits"; "bytecode": two
# warm layer0 runs with Python allowed to write bytecode, which the H200 image forbids); LIMIT caps
# logits and firsttoken (s, default 200). Records go under OUTDIR/<tree name>/.
set -uo pipefail
out=$(mkdir -p "${1:?usage: gpu_time_to_verdict.sh OUTDIR [TREE]}" && cd "$1" && pwd)
tree=$(cd "${2:-.}" && pwd); name=$(basename "$tree"); dir=$out/$name; mkdir -p "$dir"
root=$PWD
source scripts/gpu_env.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__,
  'transformers', transformers.__version__)"
  env | grep -E "^PYTHON" ; python3 -c "import os, torch; d = os.path.dirname(torch.__file__); c = d + '/__pycache__'
print('torch at', d, 'writable', os.access(d, os.W_OK), '__pycache__', os.path.isdir(c),
      'pyc files', len(os.listdir(c)) if os.path.isdir(c) else 0)"; } > "$out/versions-$name.txt" 2>&1
cat "$out/versions-$name.txt"
cd "$tree"
wall() {  # STEP ARGS...: `python3 -m glmcheck ARGS` from TREE, timed; prints wall time, verdict, phase table
  local step=$1; shift; local start rc; start=$(date +%s%N)
  timeout "${STEP_LIMIT:-590}" python3 -m glmcheck "$@" > "$dir/$step.txt" 2> "$dir/$step.err"; rc=$?
  echo "| $name | $step | $(( ($(date +%s%N) - start) / 1000000 )) ms | rc $rc | $(grep -E '^verdict' "$dir/$step.txt" | head -1)"
  sed -n '/where the time went/,$p' "$dir/$step.err"
}
export TRITON_CACHE_DIR=$(mktemp -d)
L0=(layer0 --model glm-5.2 --tp 8 --tokens 4096 --quiet --overwrite --profile)
for step in ${STEPS:-layer0 firsttoken logits}; do
  case $step in
    layer0) wall layer0-cold "${L0[@]}" --out "$dir/rec-layer0-cold"
            wall layer0-warm "${L0[@]}" --out "$dir/rec-layer0"
            wall layer0-warm2 "${L0[@]}" --out "$dir/rec-layer0-2" ;;
    firsttoken) for run in cold warm; do  # the first compiles ref-gpu's kernel variants, the second has them cached
              STEP_LIMIT=${LIMIT:-200} wall firsttoken-$run firsttoken --model ref-gpu --prompts heldout50 --quiet \
                --overwrite --profile --out "$dir/rec-firsttoken-$run"
            done ;;
    bytecode) for run in 1 2; do  # the image sets PYTHONDONTWRITEBYTECODE=1: without it, run 2 reads run 1's bytecode
              PYTHONDONTWRITEBYTECODE= wall layer0-bytecode-$run "${L0[@]}" --out "$dir/rec-layer0-bytecode-$run"
            done ;;
    logits) STEP_LIMIT=${LIMIT:-200} wall logits logits --model glm-5.2 --layers 8 --experts 16 --tp 8 \
              --tokens 2048,4096,8192 --quiet --overwrite --profile --out "$dir/rec-logits" ;;
  esac
done
if [ "${PROFILE:-0}" = 1 ]; then
  python3 -m cProfile -o "$dir/layer0.prof" -m glmcheck "${L0[@]}" --out "$dir/rec-layer0-prof" > /dev/null 2>&1
  python3 -c "
import pstats
s = pstats.Stats('$dir/layer0.prof', stream=open('$dir/layer0-profile.txt', 'w'))
s.sort_stats('cumulative').print_stats(70); s.sort_stats('tottime').print_stats(45)"
fi
cd "$root"
