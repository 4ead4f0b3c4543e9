#!/usr/bin/env bash
# GPU run 25, call 3 (issue 40): retrain ref-gpu with the committed recipe, send it back, then measure
# on it within one device call: index captures + union-stats, logits band, firsttoken on three prompt
# sets, and the verdict rates (layer0, logits, firsttoken) over seeds. Every step is cut at a shared
# deadline so the call ends inside its limit; all tables go to $OUT/evidence.log.
# Carry: .whl, .corpus, .flashmla. CPU dry run: TRAIN=0 CK=fixtures/ref-cpu SMALL=1 OUT=/tmp/o bash ...
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
start=$(date +%s); deadline=$(( start + ${BUDGET:-585} ))
left() { echo $(( deadline - $(date +%s) )); }
step() { local cap=$1; shift; local t; t=$(left); [ "$t" -gt "$cap" ] && t=$cap
         if [ "$t" -le 5 ]; then echo "SKIPPED (no time): $*" >> $OUT/evidence.log; return; fi
         echo "=== $(date -u +%T) [$t s] $*" >> $OUT/evidence.log
         timeout "$t" "$@" 2>&1 | grep -v "Loading weights\|Writing model\|it/s\]\|s/it\]" >> $OUT/evidence.log
         echo "=== rc ${PIPESTATUS[0]} after $(( $(date +%s) - start )) s" >> $OUT/evidence.log; }
if [ -d .whl ] && [ "${TRAIN:-1}" = 1 ]; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
[ -f .flashmla/_flashmla_C.abi3.so ] && export GLMCHECK_FLASHMLA_LIB=$PWD/.flashmla/_flashmla_C.abi3.so
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"; } > $OUT/versions.txt 2>&1
CK=${CK:-/tmp/train-ref-gpu/checkpoint}
if [ "${TRAIN:-1}" = 1 ]; then
  timeout ${TRAIN_BUDGET:-370} python3 scripts/train_reference_model.py ref-gpu --out /tmp/train-ref-gpu \
    --corpus .corpus/stdlib.jsonl.gz --quiet 2>&1 | grep -v "Loading weights\|Writing model" > $OUT/train-ref-gpu.log
  [ -f $CK/training_record.json ] || { echo "training did not finish" >> $OUT/evidence.log; exit 1; }
  tar -C $(dirname $CK) -cf - checkpoint | split -b 15M - $OUT/ref-gpu.tar.part-
fi
if [ "${SMALL:-0}" = 1 ]; then L1=128; L2=256; LOGITS=128,256; RT=128; SEEDS=2; LIMIT="--limit 2"; DEV=cpu
else L1=4096; L2=8192; LOGITS=2048,4096,8192; RT=4096; SEEDS=${SEEDS:-5}; LIMIT=""; DEV=cuda; fi
for n in $L1 $L2; do
  step 60 python3 -m glmcheck capture-indices --checkpoint $CK --tokens $n --out /tmp/cap-$n.safetensors
  step 30 python3 -m glmcheck union-stats --indices /tmp/cap-$n.safetensors --out /tmp/rec/union-$n
done
step 120 python3 -m glmcheck logits --checkpoint $CK --tokens $LOGITS --quiet --out /tmp/rec/logits
step 400 python3 - <<PY
import torch, glmcheck.kernels
from glmcheck.model.load import ModelSpec
from glmcheck.selftest.rates import measure_rates, rates_table
tallies = measure_rates(ModelSpec(checkpoint="$CK"), range($SEEDS), $RT, ["layer0", "logits", "firsttoken"],
                        device="$DEV", progress=lambda line: print(line, flush=True))
print("verdict rates on $CK, $RT tokens (firsttoken: 4 prompts of 64 tokens a seed), seeds 0..$(( SEEDS - 1 ))")
print(rates_table(tallies))
PY
for set in heldout50 natural50 random50; do
  step 60 python3 -m glmcheck firsttoken --checkpoint $CK --prompts $set $LIMIT --quiet --out /tmp/rec/ft-$set
done
tar -C /tmp -czf $OUT/records.tgz rec 2>/dev/null
ls -la $OUT
