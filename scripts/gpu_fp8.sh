#!/usr/bin/env bash
# The FP8 KV cache on the H200 (issue 57; docs/reliability.md, "The FP8 KV cache"): flashmla_kv's GPU test, layer0 over
# the FP8 pool on glm-5.2 and ref-gpu (flashmla_kv and our rows beside the FP8 band), the kernel bench with the FP8
# columns. Carry .whl and .flashmla.   bash scripts/gpu_fp8.sh OUTDIR   (STEPS among "tests layer0 bench dequant";
# default "tests layer0 bench"). dequant: the one-launch dequantiser's tests and the FP8 bench columns' tests on the
# GPU. (The native step's FP8 per-token kernel and its paired bench are gone: GPU run 38 call 1 measured it 4.3-5.6x
# slower than per-token+len+deq.)
# The FP8 verdict rates over 20 seeds: MODELS=ref-gpu:4096 KV=fp8_e4m3 BUDGET=540 bash scripts/gpu_layer0_rates.sh.
set -uo pipefail
out=$(mkdir -p "${1:?usage: gpu_fp8.sh OUTDIR}" && cd "$1" && pwd)
source scripts/gpu_env.sh
gpu_versions "$out/versions.txt"
wall() {  # NAME ARGS...: `python3 -m glmcheck ARGS` timed, its output in OUTDIR/NAME.txt
  local name=$1; shift; local start rc; start=$(date +%s%N)
  timeout "${STEP_LIMIT:-300}" python3 -m glmcheck "$@" > "$out/$name.txt" 2>&1; rc=$?
  echo "=== $name: rc $rc, $(( ($(date +%s%N) - start) / 1000000 )) ms"
  grep -E "^\| (band|triton|flashmla|rerun)|^verdict" "$out/$name.txt" | head -n 16
}
for step in ${STEPS:-tests layer0 bench}; do
  case $step in
    tests) timeout 240 python3 -m pytest -m "gpu or not gpu" -q -p no:cacheprovider tests/test_flashmla_kv.py \
             tests/test_fp8_band.py tests/test_bench_fp8.py > "$out/pytest-fp8.txt" 2>&1
           echo "=== FP8 tests on the GPU: rc $?"; tail -n 5 "$out/pytest-fp8.txt" ;;
    layer0) wall layer0-glm52-fp8 layer0 --model glm-5.2 --tp 8 --tokens 4096 --kv-cache-dtype fp8_e4m3 --quiet \
              --overwrite --format wide --out "$out/rec-layer0-glm52-fp8"
            wall layer0-refgpu-fp8 layer0 --model ref-gpu --tokens 4096 --kv-cache-dtype fp8_e4m3 --quiet \
              --overwrite --format wide --out "$out/rec-layer0-refgpu-fp8" ;;
    bench) STEP_LIMIT=540 wall bench-fp8 bench --kv-cache-dtype fp8_e4m3 --quiet --overwrite --out "$out/rec-bench-fp8"
           grep -E "^\|" "$out/bench-fp8.txt" | head -n 40 ;;
    dequant) timeout 240 python3 -m pytest -m "gpu or not gpu" -q -rfE -p no:cacheprovider tests/test_fp8_dequant.py \
               tests/test_bench_fp8.py > "$out/pytest-dequant.txt" 2>&1
             echo "=== dequantiser and FP8 bench tests on the GPU: rc $?"; tail -n 8 "$out/pytest-dequant.txt" ;;
  esac
done
gpu_pack "$out"
