#!/usr/bin/env bash
# The band's two forms on the GPU (docs/performance.md, "Time to verdict"; glmcheck.backends.band_triton): the band
# and reference tests on the device, layer0 timed with each form (cold then warm Triton cache), the two layer0
# records diffed, then logits on glm-5.2 with the default (Triton) form.
#   bash scripts/gpu_band_forms.sh OUTDIR
# STEPS picks among "tests layer0 logits ttv diff sweep importtime" (default the first three); LIMIT caps logits (s).
# ttv: gpu_time_to_verdict.sh's TTV_STEPS (default "layer0 bytecode firsttoken") with the Triton form; diff: one warm
# layer0 with the torch form, its record against ttv's; sweep: the ref-gpu sweep 1024..32768 with the default rows;
# importtime: `python -X importtime` of a warm layer0, the 25 slowest imports by cumulative time; reference: the
# sweep, layer0 and logits with the fp32 reference's Triton form (GLMCHECK_REFERENCE_IMPL=triton), rows timed.
set -uo pipefail
out=$(mkdir -p "${1:?usage: gpu_band_forms.sh OUTDIR}" && cd "$1" && pwd)
root=$PWD
source scripts/gpu_env.sh
for step in ${STEPS:-tests layer0 logits}; do
  case $step in
    tests) start=$(date +%s)
           timeout 240 python3 -m pytest -m "gpu or not gpu" -q -p no:cacheprovider tests/test_band_kernels.py \
             tests/test_band_triton.py tests/test_reference_triton.py tests/test_fp8_band.py tests/test_flashmla_kv.py \
             > "$out/pytest-band.txt" 2>&1
           echo "=== band tests on the GPU: rc $?, $(( $(date +%s) - start )) s"; tail -n 3 "$out/pytest-band.txt" ;;
    layer0) for form in triton torch; do
              echo "=== layer0, band form $form"
              GLMCHECK_BAND_IMPL=$form STEPS=layer0 bash scripts/gpu_time_to_verdict.sh "$out/ttv-$form" | \
                grep -E "^\| |^phase|^forwards|^total|^compile"
            done
            PYTHONPATH=$root:${PYTHONPATH:-} python3 scripts/record_diff.py "$out/ttv-triton/$(basename "$PWD")/rec-layer0" \
              "$out/ttv-torch/$(basename "$PWD")/rec-layer0" > "$out/layer0-diff.txt" 2>&1
            echo "=== layer0 record, Triton band against torch band: rc $?"; tail -n 30 "$out/layer0-diff.txt" ;;
    logits) echo "=== logits, band form triton"
            LIMIT=${LIMIT:-240} STEPS=logits bash scripts/gpu_time_to_verdict.sh "$out/ttv-triton" | \
              grep -E "^\| |^phase|^forwards|^total|^compile" ;;
    ttv) STEPS=${TTV_STEPS:-layer0 bytecode firsttoken} bash scripts/gpu_time_to_verdict.sh "$out/ttv-triton" | \
           grep -E "^\| |^phase|^imports|^forwards|^total|^compile" ;;
    diff) GLMCHECK_BAND_IMPL=torch python3 -m glmcheck layer0 --model glm-5.2 --tp 8 --tokens 4096 --quiet \
            --overwrite --out "$out/rec-layer0-torch" > "$out/layer0-torch.txt" 2>&1
          PYTHONPATH=$root:${PYTHONPATH:-} python3 scripts/record_diff.py "$out/ttv-triton/$(basename "$PWD")/rec-layer0" \
            "$out/rec-layer0-torch" > "$out/layer0-diff.txt" 2>&1
          echo "=== layer0 record, Triton band against torch band: rc $?"; tail -n 30 "$out/layer0-diff.txt" ;;
    sweep) start=$(date +%s%N)
           python3 -m glmcheck sweep --model ref-gpu --tokens 1024..32768 --quiet --overwrite --profile \
             --out "$out/rec-sweep" > "$out/sweep.txt" 2>&1
           echo "=== sweep ref-gpu 1024..32768: rc $?, $(( ($(date +%s%N) - start) / 1000000 )) ms"
           grep -E "^verdict|^phase|^imports|^forwards|^compile|^total" "$out/sweep.txt" ;;
    reference) for step in sweep layer0 logits; do
                 case $step in
                   sweep) cmd=(sweep --model ref-gpu --tokens 1024..32768) ;;
                   layer0) cmd=(layer0 --model glm-5.2 --tp 8 --tokens 4096) ;;
                   logits) cmd=(logits --model glm-5.2 --layers 8 --experts 16 --tp 8 --tokens 2048,4096,8192) ;;
                 esac
                 for form in triton torch; do
                   start=$(date +%s%N)
                   GLMCHECK_REFERENCE_IMPL=$form timeout 240 python3 -m glmcheck "${cmd[@]}" --quiet --overwrite \
                     --profile --out "$out/rec-$step-ref-$form" > "$out/$step-ref-$form.txt" 2>&1
                   echo "=== $step, reference form $form: rc $?, $(( ($(date +%s%N) - start) / 1000000 )) ms"
                   grep -E "^verdict|^total|^forwards" "$out/$step-ref-$form.txt"
                 done
               done ;;
    importtime) python3 -X importtime -m glmcheck layer0 --model glm-5.2 --tp 8 --tokens 4096 --quiet --overwrite \
                  --out "$out/rec-layer0-importtime" > /dev/null 2> "$out/importtime.txt"
                sort -t'|' -k2 -n -r "$out/importtime.txt" | head -n 25 ;;
  esac
done
