#!/usr/bin/env bash
# Everything still waiting for an H200, in the order the open issues need it. Each step writes
# under OUTDIR; run the steps in separate device calls if one call would pass 10 minutes:
#   bash scripts/gpu_session.sh OUTDIR tests|memcheck|bench|model
set -uo pipefail
out=${1:?usage: gpu_session.sh OUTDIR STEP}; step=${2:?STEP: tests, memcheck, bench or model}
mkdir -p "$out"
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
[ -f .flashmla/_flashmla_C.abi3.so ] && export GLMCHECK_FLASHMLA_LIB=$PWD/.flashmla/_flashmla_C.abi3.so
if [ -d .whl ]; then python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=$PYTHONPATH:/tmp/site; fi
case $step in
  tests)    python3 -m pytest -q -p no:cacheprovider -m "gpu or not gpu" 2>&1 | tee "$out/pytest.txt" | tail -n 15 ;;
  memcheck) bash scripts/gpu_memcheck.sh "$out" ;;
  bench)    python3 scripts/ceilings.py 2>&1 | tee "$out/ceilings.txt"
            python3 -m glmcheck bench --heads 16,32,64 --quiet --out "$out/bench" 2>&1 | tee "$out/bench.txt" | tail -n 30 ;;
  model)    /usr/bin/time -v python3 -m glmcheck layer0 --model glm-5.2 --tp 8 --tokens 4096 --quiet --out "$out/layer0" \
              2>&1 | tee "$out/layer0.txt" | grep -E "\||verdict|Elapsed|Maximum resident"
            /usr/bin/time -v python3 -m glmcheck firsttoken --model glm-5.2 --layers 8 --experts 16 --tp 8 \
              --prompts natural50 --quiet --out "$out/firsttoken" 2>&1 | tee "$out/firsttoken.txt" | grep -E "\||verdict|Elapsed" ;;
  *) echo "unknown step $step"; exit 2 ;;
esac
