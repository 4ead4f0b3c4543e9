#!/usr/bin/env bash
# Device call 1: the whole suite on HEAD (issue 30's pass count after the move), then the graph-timing check.
set -u
mkdir -p /tmp/h && tar xf headsrc.tar -C /tmp/h && cp -r .whl .flashmla /tmp/h/
cd /tmp/h
nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
start=$(date +%s)
timeout 470 bash scripts/gpu_session.sh $OUT/suite tests 2>&1 | tail -25
echo "suite wall $(( $(date +%s) - start )) s"
left=$(( 580 - ($(date +%s) - start) ))
if [ $left -gt 60 ]; then
  export PYTHONPATH=/tmp/h:/tmp/site
  export GLMCHECK_FLASHMLA_LIB=/tmp/h/.flashmla/_flashmla_C.abi3.so
  timeout $(( left - 10 )) python3 -m glmcheck bench --timing graph --points 1x2048:128 --paired per-token,flashmla+len \
    --pair-rounds 5 --quiet --out $OUT/benchgraph 2>&1 | tail -30
fi
