#!/usr/bin/env bash
# GPU run 40, call 7: firsttoken ref-gpu heldout50 on a fresh machine (no ~/.nv yet), a fresh Triton cache, with the
# precompile child warming hf_sdpa's SDPA kernels too; its ComputeCache after.
export PYTHONPATH=$PWD; source scripts/gpu_env.sh; mkdir -p $OUT; ls ~/.nv 2>&1 | head -2; s=$(date +%s)
TRITON_CACHE_DIR=$(mktemp -d) timeout 130 python3 -m glmcheck firsttoken --model ref-gpu --prompts heldout50 --quiet \
  --overwrite --profile --out $OUT/rec > $OUT/ft.txt 2> $OUT/ft.err
echo "rc $? wall $(( $(date +%s) - s )) s"; grep -E "^verdict" $OUT/ft.txt; sed -n '/where the time went/,$p' $OUT/ft.err
du -sb ~/.nv/ComputeCache 2>&1
