#!/usr/bin/env bash
# On the GPU: build scripts/tma_rows_probe.cu for sm_90a and run its three parts, each in its own process (a form
# the hardware faults on ends only its own part), into OUT/tma-rows.txt with the machine's versions.
#   bash scripts/gpu_tma_rows_probe.sh OUT [KV_ROWS] [PAIRS]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: gpu_tma_rows_probe.sh OUT [KV_ROWS] [PAIRS]}
rows=${2:-8192}
pairs=${3:-2000}
mkdir -p "$out"
log=$out/tma-rows.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nvcc --version | tail -1; } \
  > "$log" 2>&1
nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Xptxas -v -o /tmp/tma_rows_probe \
  scripts/tma_rows_probe.cu >> "$log" 2>&1 || { echo "build failed" >> "$log"; cat "$log"; exit 1; }
cuobjdump -sass /tmp/tma_rows_probe | grep -cE 'LDL|STL' | sed 's/^/local-memory instructions: /' >> "$log"
for form in 1 2 3; do timeout 60 /tmp/tma_rows_probe layout "$form" "$rows" >> "$log" 2>&1 || echo "layout form $form: exit $?" >> "$log"; done
for ctas in 1000 1; do  # every SM (the L2 loaded as the tile loads it), then one (the SM's own rate)
  timeout 120 /tmp/tma_rows_probe alone 1 "$rows" "$ctas" >> "$log" 2>&1 || echo "alone: exit $?" >> "$log"
done
timeout 240 /tmp/tma_rows_probe beside 1 "$rows" "$pairs" >> "$log" 2>&1 || echo "beside: exit $?" >> "$log"
cat "$log"
