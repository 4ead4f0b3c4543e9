#!/usr/bin/env bash
# Issue 42 on the H200: the GPU trained model (ref-gpu) served by `glmcheck serve` with each built-in backend, judged by
# `glmcheck tasks` on glmcheck_heldout_mc (all 400 questions) against the reference backend, its rerun the control.
# The H200 lacks fastapi, uvicorn, pydantic, lm-eval, datasets and their small dependencies: carry them installed for
# py312 as .gpu-carry/site.tar.xz (3.3 MB), built by `bash scripts/make_gpu_site.sh` (the wheels themselves, beside the
# ~59 MiB tracked tree, exceed a device call's 64 MiB; a .whl folder of wheels is still installed if carried instead),
# and FlashMLA's library as .gpu-carry/flashmla.tar.xz (0.9 MB). Tables go to $OUT/tasks.log.
set -uo pipefail
[ -f .gpu-carry/flashmla.tar.xz ] && mkdir -p .flashmla && tar -xJf .gpu-carry/flashmla.tar.xz -C .flashmla
export PYTHONPATH=$PWD
source scripts/gpu_env.sh  # the carried packages and FlashMLA's library
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
declare -A BACKENDS=([ref]=reference [token]=triton_sparse_mla [u2]=triton_sparse_mla:union2 [u4]=triton_sparse_mla:union4
                     [u8]=triton_sparse_mla:union8 [flashmla]=flashmla_sparse)
declare -A PIDS
for name in "${!BACKENDS[@]}"; do
  python3 -m glmcheck serve --model ref-gpu --backend "${BACKENDS[$name]}" --port 0 > /tmp/serve-$name.out 2>&1 &
  PIDS[$name]=$!
done
for name in "${!BACKENDS[@]}"; do  # each server's URL, or its log and exit 1 as soon as one dies
  until grep -q "http://" /tmp/serve-$name.out; do
    kill -0 ${PIDS[$name]} 2>/dev/null || { echo "server $name died:"; tail -5 /tmp/serve-$name.out; pkill -f "glmcheck serve"; exit 1; }
    sleep 1
  done
done
url() { grep -o 'http://[0-9.:]*' /tmp/serve-$1.out | head -1; }
args=(--endpoint ref=$(url ref))
for name in token u2 u4 u8 flashmla; do args+=(--endpoint $name=$(url $name)); done
timeout ${TASKS_TIMEOUT:-480} python3 -m glmcheck tasks "${args[@]}" --tasks glmcheck_heldout_mc --model ref-gpu --out /tmp/rec/tasks 2>&1 | tee $OUT/tasks.log
python3 -m glmcheck report /tmp/rec/tasks --plots > /dev/null 2>&1 && cp /tmp/rec/tasks/plot-tasks.png $OUT/
pkill -f "glmcheck serve" || true
mkdir -p $OUT/record && cp /tmp/rec/tasks/*.json /tmp/rec/tasks/*.parquet $OUT/record/ 2>/dev/null
for name in "${!BACKENDS[@]}"; do tail -3 /tmp/serve-$name.out > $OUT/serve-$name.tail; done
