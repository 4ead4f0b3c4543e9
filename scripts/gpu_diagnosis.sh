#!/usr/bin/env bash
# The diagnosis and the minimal repro on the GPU (issue 71; docs/diagnosis.md, "Cost"): ref-gpu at
# 4096 tokens, a layer0 run that FAILS (the kernel under test with heads 0 and 1 swapped) and one that PASSes, each with
# --profile (the `diagnose` phase against the run's total; the PASS run has none), the repro of the FAIL written and
# run on the GPU (exit 1 on the fault, 0 with the kernel under test named), then the diagnosis's rates at GPU scale.
#   bash scripts/gpu_diagnosis.sh OUTDIR
# SEEDS (default 2; each a few minutes): seeds of the rates (faults on the kernel under test), RATES=0 skips them.
set -uo pipefail
out=$(mkdir -p "${1:?usage: gpu_diagnosis.sh OUTDIR}" && cd "$1" && pwd)
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
source scripts/gpu_env.sh
gpu_versions "$out/versions.txt"
wall() {  # NAME CMD...: timed, output to OUTDIR/NAME.txt
  local name=$1; shift; local start rc; start=$(date +%s%N)
  "$@" > "$out/$name.txt" 2>&1; rc=$?
  echo "=== $name: $(( ($(date +%s%N) - start) / 1000000 )) ms, rc $rc"
}
fault=hs=glmcheck.selftest.faults:heads_swapped
for run in 1 2; do  # the second run is warm (Triton's cache)
  wall "fail$run" python3 -m glmcheck layer0 --model ref-gpu --tokens 4096 --quiet --profile \
    --backends "triton_sparse_mla,$fault" --out "$out/rec-fail$run"
  grep -E "^hs:|^verdict|diagnose|forwards |total" "$out/fail$run.txt"
  wall "pass$run" python3 -m glmcheck layer0 --model ref-gpu --tokens 4096 --quiet --profile \
    --backends triton_sparse_mla --out "$out/rec-pass$run"
  grep -E "^verdict|diagnose|forwards |total" "$out/pass$run.txt"
done
wall repro python3 -m glmcheck layer0 --model ref-gpu --tokens 4096 --quiet --profile --backends "$fault" \
  --repro "$out/repro" --out "$out/rec-repro"
grep -E "^hs:|repro|total" "$out/repro.txt"
wall script-fault python3 "$out/repro/hs/repro.py"; cat "$out/script-fault.txt"
wall script-fixed python3 "$out/repro/hs/repro.py" --kernel triton_sparse_mla; cat "$out/script-fixed.txt"
if [ "${RATES:-1}" = 1 ]; then
  wall rates python3 scripts/measure_diagnosis.py --model ref-gpu --device cuda --tokens 4096 \
    --base triton_sparse_mla --seeds "${SEEDS:-2}"
  tail -n 40 "$out/rates.txt"
fi
gpu_pack "$out"
