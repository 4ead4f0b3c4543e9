#!/usr/bin/env bash
# The kernel as an engine calls it, on the H200 (issue 70; docs/checks.md, "Engine-shaped calls"): layer0 on ref-gpu
# with --calls serving at 4096 and 8192 tokens in chunks of 1024 and 2048, over a pool of 2^22 rows (2^22 x 576 > 2^31
# elements: int64 row offsets), 2 requests a call, every default row (the exact reference, the band, per-token, union
# 2/4/8, FlashMLA's sparse prefill) and, over the FP8 pool, flashmla_kv; the one-shot runs beside them. Then the
# all-position logits on ref-gpu (every layer) at 4096 tokens in chunks of 1024. Prints per run its verdicts and the
# engine-shaped table (per row: engine calls, = its one-shot output bit for bit, the time in each shape); $OUT gets
# every record (rec-*/summary.json, rows.parquet) and each run's full output (*.txt).
# Carry .flashmla (FlashMLA's library; without it the FlashMLA rows are absent). About 4-6 minutes warm.
#     bash scripts/gpu_engine_calls.sh "$OUT"
set -uo pipefail
out=$(mkdir -p "${1:?usage: gpu_engine_calls.sh OUTDIR}" && cd "$1" && pwd)
source scripts/gpu_env.sh
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
start=$(date +%s); deadline=$(( start + ${BUDGET:-520} ))
gpu_versions "$out/versions.txt"
run() {  # NAME ARGS...: `python3 -m glmcheck ARGS --out OUT/rec-NAME`, timed, cut at the deadline; its lines printed
  local name=$1; shift; local left=$(( deadline - $(date +%s) )) began rc
  if (( left < 30 )); then echo "=== $name: skipped (budget spent)"; return; fi
  began=$(date +%s%N)
  timeout "$(( left < 240 ? left : 240 ))" python3 -m glmcheck "$@" --quiet --overwrite --format wide \
    --out "$out/rec-$name" > "$out/$name.txt" 2>&1; rc=$?
  echo "=== $name: rc $rc, $(( ($(date +%s%N) - began) / 1000000 )) ms wall"
  grep -E "^engine-shaped|^\| (backend|reference|band|triton|flashmla|noise band)|^verdict|Error|Traceback" \
    "$out/$name.txt" | head -n 40
}
run layer0-4096-prefill layer0 --model ref-gpu --tokens 4096
for chunk in 1024 2048; do
  run "layer0-4096-serving-c$chunk" layer0 --model ref-gpu --tokens 4096 --calls serving --chunk "$chunk"
done
run layer0-8192-prefill layer0 --model ref-gpu --tokens 8192
for chunk in 1024 2048; do
  run "layer0-8192-serving-c$chunk" layer0 --model ref-gpu --tokens 8192 --calls serving --chunk "$chunk"
done
run layer0-4096-fp8-serving-c1024 layer0 --model ref-gpu --tokens 4096 --calls serving --chunk 1024 \
  --kv-cache-dtype fp8_e4m3
run layer0-8192-fp8-serving-c2048 layer0 --model ref-gpu --tokens 8192 --calls serving --chunk 2048 \
  --kv-cache-dtype fp8_e4m3
run layer0-8192-serving-r4 layer0 --model ref-gpu --tokens 8192 --calls serving --chunk 2048 --requests 4
run logits-4096-serving-c1024 logits --model ref-gpu --tokens 4096 --calls serving --chunk 1024
echo "=== total $(( $(date +%s) - start )) s"
gpu_pack "$out"
