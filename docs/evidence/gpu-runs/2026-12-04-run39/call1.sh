#!/usr/bin/env bash
# GPU run 39, call 1 (issue 56, item 5): the power curves on ref-gpu, the kernel under test as the base,
# layer0 and all-position logits, 20 seeds at 4096 tokens.
set -uo pipefail
export PYTHONPATH=$PWD
source scripts/gpu_env.sh
mkdir -p $OUT/p
{ date -u; git log --oneline -1; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"; } > $OUT/p/versions.txt 2>&1
cat $OUT/p/versions.txt
s=$(date +%s)
timeout 540 python3 -m glmcheck selftest --power --model ref-gpu --seeds 20 --tokens 4096 > $OUT/p/power.txt 2> $OUT/p/power.err
echo "=== power: rc $?, $(( $(date +%s) - s )) s"
tail -n 40 $OUT/p/power.txt; tail -n 5 $OUT/p/power.err
cd $OUT && tar czf p.tgz p && rm -rf p
