#!/usr/bin/env bash
# Issue 40 ("layer0 still 100 %") on the H200: layer0's verdict rates over 20 seeds on the trained models
# with the temperature-bias statistic (docs/reliability.md, "Temperature bias"); run 26 call 1 measured them without
# it. As run 26's rates.sh: the seeds split over parallel processes on the one GPU, their tallies merged.
# Carry nothing (FlashMLA is not used here). Tables go to $OUT/rates.log.
# Tried once on a fresh machine (2026-12-02, BUDGET=330, SPLIT=4: ten processes): only the first seed of each slice
# finished (ref-gpu 5 of 20, ref-cpu 10 of 20), every process compiling every kernel at once on 16 cores with an
# empty Triton cache. So seed 0 of each model now runs alone first (filling the cache), then the slices; give it
# BUDGET=540 on a fresh machine.
# Each seed's tally is its own file, so slices cut by the deadline keep what they finished. Keep BUDGET 20 s under
# the device call's limit (the device time left can lower it): a call killed at its limit returns nothing.
# MODELS picks the models, e.g. MODELS=ref-gpu:4096 SPLIT=2 for the 20 ref-gpu seeds alone; KV=fp8_e4m3 runs every
# seed over the FP8 KV pool (the band's FP8 form: docs/reliability.md, "The FP8 KV cache").
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
start=$(date +%s); deadline=$(( start + ${BUDGET:-280} ))
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"; } > $OUT/versions.txt 2>&1
SEEDS=${SEEDS:-20}; SPLIT=${SPLIT:-4}  # MODELS="ref-gpu:4096 ref-cpu:128" by default
slice() {  # model tokens first last
  timeout $(( deadline - $(date +%s) - 15 )) python3 - "$@" <<'PY'
import dataclasses, json, os, sys, glmcheck.kernels
from glmcheck.model.load import ModelSpec
from glmcheck.selftest.rates import measure_rates
model, tokens, first, last = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for seed in range(first, last):  # one file per seed: a slice cut by the deadline keeps the seeds it finished
    tallies = measure_rates(ModelSpec(preset=model), [seed], tokens, ["layer0"], device="cuda",
                            progress=lambda line: print(model, line, flush=True),
                            kv_cache_dtype=os.environ.get("KV") or None)
    json.dump([dataclasses.asdict(t) for t in tallies], open(f"/tmp/tallies-{model}-{seed}.json", "w"))
PY
}
for model_tokens in ${MODELS:-ref-gpu:4096 ref-cpu:128}; do  # seed 0 alone: compiles every kernel once, into the cache
  set -- ${model_tokens/:/ }
  slice $1 $2 0 1 > /tmp/rates-$1-0.log 2>&1
  echo "=== $1 seed 0 (cache warm-up) after $(( $(date +%s) - start )) s" >> $OUT/rates.log
done
pids=()
for model_tokens in ${MODELS:-ref-gpu:4096 ref-cpu:128}; do
  set -- ${model_tokens/:/ }
  for (( first=1; first<SEEDS; first+=SPLIT )); do
    slice $1 $2 $first $(( first + SPLIT < SEEDS ? first + SPLIT : SEEDS )) > /tmp/rates-$1-$first.log 2>&1 &
    pids+=($!)
  done
done
wait "${pids[@]}"
echo "=== rates slices done after $(( $(date +%s) - start )) s" >> $OUT/rates.log
MODELS="${MODELS:-ref-gpu:4096 ref-cpu:128}" python3 - >> $OUT/rates.log 2>&1 <<'PY'
import glob, json, os
from glmcheck.selftest.rates import Tally, rates_table
for model, tokens in (item.split(":") for item in os.environ["MODELS"].split()):
    merged = {}
    files = sorted(glob.glob(f"/tmp/tallies-{model}-*.json"))
    if not files:
        print(f"\nlayer0 verdict rates on {model}: no seed finished")
        continue
    for path in files:
        for t in json.load(open(path)):
            key = (t["check"], t["backend"])
            m = merged.setdefault(key, Tally(t["check"], t["backend"], t["legitimate"]))
            m.fails += t["fails"]; m.runs += t["runs"]; m.inconclusive += t["inconclusive"]; m.margins += t["margins"]
    print(f"\nlayer0 verdict rates on {model}, {tokens} tokens, {len(files)} seeds: "
          + " ".join(sorted((p.rsplit("-", 1)[1][:-5] for p in files), key=int)))
    print(rates_table(list(merged.values())))
    for (check, backend), t in sorted(merged.items()):
        print(f"{backend}: margins min {min(t.margins):.3g} max {max(t.margins):.3g}")
PY
cat /tmp/rates-*.log | grep -v "Loading weights" | tail -40 > $OUT/rates-progress.log
cat $OUT/rates.log
