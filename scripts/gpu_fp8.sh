#!/usr/bin/env bash
# The FP8 KV cache on the H200 (issue 57; docs/reliability.md, "The FP8 KV cache"): flashmla_kv's GPU test, layer0 over
# the FP8 pool on glm-5.2 and ref-gpu (flashmla_kv and our rows beside the FP8 band), the kernel bench with the FP8
# columns. Carry .whl and .flashmla.   bash scripts/gpu_fp8.sh OUTDIR   (STEPS among "tests layer0 bench native";
# default "tests layer0 bench"). native (issue 57, item 5): the one-launch dequantiser's and the FP8 per-token kernel's
# tests on the GPU, then the bench at the five H = 8 points and 1x8192 at H = 16, 64 with per-token+len+deq (the
# dequantisation in the call) against per-token+len+fp8 (the kernel reading the pool) in paired rounds.
# The FP8 verdict rates over 20 seeds: MODELS=ref-gpu:4096 KV=fp8_e4m3 BUDGET=540 bash scripts/gpu_layer0_rates.sh.
set -uo pipefail
out=$(mkdir -p "${1:?usage: gpu_fp8.sh OUTDIR}" && cd "$1" && pwd)
source scripts/gpu_env.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__,
  'transformers', transformers.__version__)"; } > "$out/versions.txt" 2>&1
cat "$out/versions.txt"
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
    native) start=$(date +%s)  # within one 10-minute device call: tests (at most 240 s), then the bench in two parts
            timeout 240 python3 -m pytest -m "gpu or not gpu" -q -rfE -p no:cacheprovider tests/test_fp8_dequant.py \
              tests/test_per_token_fp8.py tests/test_bench_fp8.py > "$out/pytest-native.txt" 2>&1
            echo "=== dequantiser and FP8 per-token kernel tests on the GPU: rc $?, $(( $(date +%s) - start )) s"
            tail -n 8 "$out/pytest-native.txt"
            # The H = 8 points (the verdict's) first, then H = 16 and 64: a part cut short by its limit loses only
            # itself (the bench prints nothing before its last point).
            for part in h8:1x2048:8,1x4096:8,1x8192:8,2x4096:8,4x2048:8 h16-64:1x8192:16,1x8192:64; do
              name=${part%%:*}; start=$(date +%s)
              timeout "${NATIVE_LIMIT:-160}" python3 -m glmcheck bench --kv-cache-dtype fp8_e4m3 --quiet --overwrite \
                --points "${part#*:}" --paired per-token+len+deq,per-token+len+fp8 --pair-rounds 5 \
                --out "$out/rec-bench-native-$name" > "$out/bench-native-$name.txt" 2>&1
              echo "=== bench-native-$name: rc $?, $(( $(date +%s) - start )) s"
              grep -E "^\|" "$out/bench-native-$name.txt" | head -n 60
            done ;;
  esac
done
