#!/usr/bin/env bash
# Time to verdict on the GPU (issue 55; docs/performance.md, "Time to verdict"): the commands the issue times, as a
# new user runs them, each with its wall time and its --profile phase table; layer0 from a cold Triton cache, then
# twice warm (the second also reads any bytecode the first cached: `glmcheck.bytecode`).
#   bash scripts/gpu_time_to_verdict.sh OUTDIR [TREE]
# TREE (default .): a folder holding a glmcheck package to run instead of this checkout's, or a git revision (e.g.
# fc20ae8, the day issue 55 was filed), exported to /tmp/tree-REV with its `fixtures/` linked to this checkout's
# trained models and held-out corpus (the layout before the package data moved); it runs from there, so its package
# is the one imported. A tree whose CLI has no --profile runs without it (wall times only).
# PROFILE=1 adds a cProfile of a warm layer0; STEPS picks steps (default "layer0 firsttoken logits"; "bytecode": two
# warm layer0 runs with Python allowed to write bytecode, which the H200 image forbids); LIMIT caps
# logits and firsttoken (s, default 200). Records go under OUTDIR/<tree name>/.
set -uo pipefail
out=$(mkdir -p "${1:?usage: gpu_time_to_verdict.sh OUTDIR [TREE]}" && cd "$1" && pwd)
root=$PWD
if [ -n "${2:-}" ] && [ ! -d "$2" ]; then  # a git revision: export it beside a link to today's trained models
  export_dir=/tmp/tree-$2; rm -rf "$export_dir"; mkdir -p "$export_dir/fixtures"
  git archive "$2" glmcheck prompts 2>/dev/null | tar -x -C "$export_dir" || git archive "$2" glmcheck | tar -x -C "$export_dir"
  models=$(dirname "$(dirname "$(find "$root/glmcheck" -path '*ref-gpu/config.json' | head -1)")")
  for m in "$models"/*; do ln -s "$m" "$export_dir/fixtures/$(basename "$m")"; done
  ln -s "$(dirname "$models")/corpus" "$export_dir/fixtures/reference-corpus"  # the held-out corpus, as it was named
  set -- "$1" "$export_dir"
fi
tree=$(cd "${2:-.}" && pwd); name=$(basename "$tree"); dir=$out/$name; mkdir -p "$dir"
source scripts/gpu_env.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__,
  'transformers', transformers.__version__)"
  env | grep -E "^PYTHON" ; python3 -c "import os, torch; d = os.path.dirname(torch.__file__); c = d + '/__pycache__'
print('torch at', d, 'writable', os.access(d, os.W_OK), '__pycache__', os.path.isdir(c),
      'pyc files', len(os.listdir(c)) if os.path.isdir(c) else 0)"; } > "$out/versions-$name.txt" 2>&1
cat "$out/versions-$name.txt"
cd "$tree"
if ! python3 -m glmcheck layer0 --help 2>/dev/null | grep -q -- "--profile"; then
  NO_PROFILE=1; echo "($name has no --profile: wall times only)"
fi
wall() {  # STEP ARGS...: `python3 -m glmcheck ARGS` from TREE, timed; prints wall time, verdict, phase table
  local step=$1; shift; local start rc; start=$(date +%s%N)
  [ -n "${NO_PROFILE:-}" ] && set -- $(printf '%s\n' "$@" | grep -v -x -- "--profile")
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
