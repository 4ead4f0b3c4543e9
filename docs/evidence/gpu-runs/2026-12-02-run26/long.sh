#!/usr/bin/env bash
# GPU run 26, call 2 (issues 41 and 40): the length sweep of the GPU reference model from 1024 to 32768 tokens
# with every built-in backend, `glmcheck bench --model ref-gpu` with its own indexer, and glmcheck logits of
# glm-5.2 (4 layers, 16 experts, TP8 head slices) at 65536 tokens in one process (the chunked indexer). Every
# step ends at a shared deadline; tables go to $OUT/long.log, the sweep's plot to $OUT.
# Carry: .whl, .flashmla.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
start=$(date +%s); deadline=$(( start + ${BUDGET:-540} ))
left() { echo $(( deadline - $(date +%s) )); }
step() { local cap=$1; shift; local t; t=$(left); [ "$t" -gt "$cap" ] && t=$cap
         if [ "$t" -le 5 ]; then echo "SKIPPED (no time): $*" >> $OUT/long.log; return; fi
         echo "=== $(date -u +%T) [$t s] $*" >> $OUT/long.log
         timeout "$t" "$@" 2>&1 | grep -v "Loading weights\|it/s\]\|s/it\]" >> $OUT/long.log
         echo "=== rc ${PIPESTATUS[0]} after $(( $(date +%s) - start )) s" >> $OUT/long.log; }
[ -d .whl ] && python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=$PYTHONPATH:/tmp/site
[ -f .flashmla/_flashmla_C.abi3.so ] && export GLMCHECK_FLASHMLA_LIB=$PWD/.flashmla/_flashmla_C.abi3.so
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"; } > $OUT/versions.txt 2>&1
step 280 python3 -m glmcheck sweep --model ref-gpu --tokens ${SWEEP:-1024..32768} --quiet --out /tmp/rec/sweep
python3 -m glmcheck report /tmp/rec/sweep --plots > /dev/null 2>&1 && cp /tmp/rec/sweep/plot-sweep.png $OUT/ 2>/dev/null
step 70 python3 -m glmcheck bench --model ref-gpu --tokens ${BENCH:-4096,8192} --out /tmp/rec/bench
step 400 python3 -m glmcheck logits --model glm-5.2 --layers 4 --experts 16 --tp 8 --tokens ${LONG:-65536} --band 3 \
  --backends triton_sparse_mla,triton_sparse_mla:union8,flashmla_sparse --quiet --out /tmp/rec/logits65k
tar -C /tmp -czf $OUT/records.tgz rec 2>/dev/null
tail -80 $OUT/long.log
