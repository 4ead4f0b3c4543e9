#!/usr/bin/env bash
# One device call: union build variants, MMA/register probe, 64-row union tile sweep, then the
# union/tile GPU tests. Usage (GPU machine, repository root): bash scripts/gpu_union_experiments.sh OUTDIR
set -uo pipefail
out=${1:?usage: gpu_union_experiments.sh OUTDIR}
mkdir -p "$out"
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
timeout 150 python3 scripts/build_sweep.py 2>&1 | tee "$out/build.log"
timeout 90 python3 scripts/mma_probe.py 2>&1 | tee "$out/mma.log"
timeout 200 python3 scripts/tile_sweep.py --configs union:8:8,union:16:4,union:32:2,union:8:4 \
  --tiles 32/8/2,64/8/2,32/8/1,16/8/2,32/4/2,64/4/2 --out "$out/tiles.json" 2>&1 | tee "$out/tiles.log" | grep -v "^{"
timeout 140 python3 -m pytest -q -p no:cacheprovider -m "gpu or not gpu" tests/test_union.py tests/test_tiles.py \
  2>&1 | tee "$out/pytest_union.txt" | tail -n 8
