#!/usr/bin/env bash
# GPU run 26, call 1 (issue 40, item 4): the verdict rates over 20 seeds on the trained reference models,
# and firsttoken's band rows on ref-gpu's three prompt sets. The seeds run in parallel processes on the one
# GPU (each process a slice of the seeds; their tallies are merged: the rates of 20 seeds whatever the split).
# Carry: .whl, .flashmla. Every step ends at a shared deadline; tables go to $OUT/rates.log.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
start=$(date +%s); deadline=$(( start + ${BUDGET:-570} ))
[ -d .whl ] && python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=$PYTHONPATH:/tmp/site
[ -f .flashmla/_flashmla_C.abi3.so ] && export GLMCHECK_FLASHMLA_LIB=$PWD/.flashmla/_flashmla_C.abi3.so
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"; } > $OUT/versions.txt 2>&1
DEV=${DEV:-cuda}; SEEDS=${SEEDS:-20}; SPLIT=${SPLIT:-5}
# one slice of seeds of one model: tallies as JSON
slice() {  # model tokens first last
  timeout $(( deadline - $(date +%s) - 20 )) python3 - "$@" <<'PY'
import dataclasses, json, sys, glmcheck.kernels
from glmcheck.model.load import ModelSpec
from glmcheck.selftest.rates import measure_rates
import os
model, tokens, first, last = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
tallies = measure_rates(ModelSpec(preset=model), range(first, last), tokens, ["layer0", "logits", "firsttoken"],
                        device=os.environ.get("DEV", "cuda"), progress=lambda line: print(model, line, flush=True))
json.dump([dataclasses.asdict(t) for t in tallies], open(f"/tmp/tallies-{model}-{first}.json", "w"))
PY
}
export DEV
pids=()
for model_tokens in "ref-gpu 4096" "ref-cpu 128"; do
  set -- $model_tokens
  for (( first=0; first<SEEDS; first+=SPLIT )); do
    slice $1 $2 $first $(( first + SPLIT < SEEDS ? first + SPLIT : SEEDS )) > /tmp/rates-$1-$first.log 2>&1 &
    pids+=($!)
  done
done
for set in heldout50 natural50 random50; do
  timeout $(( deadline - $(date +%s) - 60 )) python3 -m glmcheck firsttoken --model ref-gpu --prompts $set --quiet \
    --out /tmp/rec/ft-$set > /tmp/ft-$set.log 2>&1
  echo "=== firsttoken $set rc $? after $(( $(date +%s) - start )) s" >> $OUT/rates.log
  grep -v "Loading weights" /tmp/ft-$set.log >> $OUT/rates.log
done
wait "${pids[@]}"
echo "=== rates slices done after $(( $(date +%s) - start )) s" >> $OUT/rates.log
python3 - >> $OUT/rates.log 2>&1 <<'PY'
import glob, json
from glmcheck.selftest.rates import Tally, rates_table
for model, tokens in (("ref-gpu", 4096), ("ref-cpu", 128)):
    merged = {}
    files = sorted(glob.glob(f"/tmp/tallies-{model}-*.json"))
    for path in files:
        for t in json.load(open(path)):
            key = (t["check"], t["backend"])
            m = merged.setdefault(key, Tally(t["check"], t["backend"], t["legitimate"]))
            m.fails += t["fails"]; m.runs += t["runs"]; m.inconclusive += t["inconclusive"]; m.margins += t["margins"]
    print(f"\nverdict rates on {model}, {tokens} tokens (firsttoken: 4 prompts of 64 tokens a seed), "
          f"{len(files)} slices of seeds")
    print(rates_table(list(merged.values())))
PY
cat /tmp/rates-*.log | grep -v "Loading weights" > $OUT/rates-progress.log
tar -C /tmp -czf $OUT/records.tgz rec 2>/dev/null
tail -60 $OUT/rates.log
