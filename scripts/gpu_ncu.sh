#!/usr/bin/env bash
# Nsight Compute on the ping-pong tile and the marks build (issue 74: where the pair's and the build's time goes).
#   bash scripts/gpu_ncu.sh OUTDIR [CASES]     CASES: "what:point ..." (default below); what = tile or build
# Per case, one profiled launch (the second call: scripts/gpu_profile_call.py) with the sections that say which unit
# bounds a kernel (throughput by unit, the shared-memory and L1 traffic, warp stall reasons, instruction mix) and
# the per-instruction stall samples of SASS (per partition and mbarrier: scripts/ncu_stalls.py); text pages under
# OUTDIR/<case>/, packed into OUTDIR/results.tgz.
set -uo pipefail
cases=${2:-tile:1x8192:64 tile:1x8192:16 build:1x8192:16}
for case in $cases; do case ${case%%:*} in tile|build) ;;
  *) echo "gpu_ncu.sh: CASES takes what:point items with what = tile or build, got '$case'" >&2; exit 2 ;; esac; done
out=$(mkdir -p "${1:?usage: gpu_ncu.sh OUTDIR [CASES]}" && cd "$1" && pwd)
source scripts/gpu_env.sh
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
gpu_versions "$out/versions.txt"
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
if [ -z "$ncu" ]; then echo "no ncu on this machine"; exit 3; fi
"$ncu" --version | tail -n 1 | tee -a "$out/versions.txt"
sections="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis
  --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section SchedulerStats --section InstructionStats
  --section LaunchStats --section Occupancy --section SourceCounters"
for case in $cases; do
  what=${case%%:*}; point=${case#*:}; name=$(echo "$case" | tr ':' '-'); dir=$out/$name; mkdir -p "$dir"
  kernel=$([ "$what" = tile ] && echo pingpong || echo union_marks)
  start=$(date +%s)
  timeout 240 "$ncu" $sections --launch-skip 1 --launch-count 1 -k "regex:$kernel" -f -o "$dir/profile" \
    python3 scripts/gpu_profile_call.py "$what" "$point" > "$dir/run.txt" 2>&1
  echo "=== $case: rc $? in $(( $(date +%s) - start )) s"
  grep -E "rel-L2|build run|==ERR|==WARNING|ERR_" "$dir/run.txt" | head -n 5
  if [ -f "$dir/profile.ncu-rep" ]; then
    "$ncu" --import "$dir/profile.ncu-rep" --page details --print-details all > "$dir/details.txt" 2>&1
    "$ncu" --import "$dir/profile.ncu-rep" --page raw --csv > "$dir/raw.csv" 2>&1
    "$ncu" --import "$dir/profile.ncu-rep" --page source --csv --print-source sass > "$dir/sass.csv" 2>&1
    python3 scripts/ncu_stalls.py "$dir/sass.csv" > "$dir/stalls.txt" 2>&1 || echo "ncu_stalls.py failed (pandas?)"
    grep -E "Duration|Throughput|Pipe|Stall|Issue|Bank|Wavefront|Shared|L1/TEX Hit|L2 Hit|Registers|Executed Ipc" \
      "$dir/details.txt" | head -n 60
  fi
done
gpu_pack "$out"
