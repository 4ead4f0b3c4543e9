#!/usr/bin/env bash
# Everything still waiting for an H200, in the order the open issues need it. Each step writes
# under OUTDIR; run the steps in separate device calls if one call would pass 10 minutes:
#   bash scripts/gpu_session.sh OUTDIR tests|contract|memcheck|bench|benchgraph|benchmodel|model|union|builds|pingpong|pingpongtrace|pingpongceiling|l2window|accuracy
#   (tests [IDS...]: only those)
# contract: the kernel contract on the GPU: the contract matrix (its table in matrix.md), the pool
# past 2**31 elements on every path, and the kernel test files (tests/test_contract_matrix.py,
# test_per_token, test_union, test_token_rows, test_tiles, test_bench), -m "gpu or not gpu".
# builds: every union build timed alone and in the whole path (scripts/build_sweep.py), then the bench
# with the fastest build per G of that sweep (scripts/bench_with_builds.py); about 4 minutes.
# union: the union build variants (search, merge, hash), the MMA probe, the 64-row tile sweep and the
# union GPU tests (scripts/gpu_union_experiments.sh, about 6.5 minutes).
# Record directories (summary.json, rows.parquet, items/) go under $GLMCHECK_RECORDS when set
# (e.g. a folder tarred afterwards, when only a few files may come back), else under OUTDIR.
# pingpong: the ping-pong tile's GPU tests, then the tile against the split tile at 1 x 2048 and
# 1 x 8192 for H = 8 and 64 (scripts/pingpong_probe.py; --variant FIELD=INT,... after STEP times a
# WsConfig knob). pingpongtrace: the clock64 trace at H = 64 and 8 (scripts/pingpong_trace.py).
# pingpongceiling: the tile against its gather-only and compute-only forms (scripts/pingpong_ceiling.py).
# l2window: the tile with and without the KV persisting in L2 (scripts/l2_window_probe.py).
# accuracy: the bench's backends against the fp64 reference on its inputs (scripts/accuracy_fp64.py).
# bench: the ceilings probe, then `glmcheck bench` (eager, its default points); benchgraph: the same
# bench with CUDA-graph replay (--timing graph).
# Every step first writes versions.txt (date, GPU, driver, torch, triton).
# model: layer0 and firsttoken start cold (fresh process, empty Triton cache) and print their
# wall time ("Elapsed"; /usr/bin/time -v when the machine has it).
set -uo pipefail
out=${1:?usage: gpu_session.sh OUTDIR STEP}; step=${2:?STEP: tests, contract, memcheck, bench, benchgraph, benchmodel, model, union, builds, pingpong, pingpongtrace, pingpongceiling, l2window or accuracy}
rec=${GLMCHECK_RECORDS:-$out}
mkdir -p "$out" "$rec"
timed() {
  if [ -x /usr/bin/time ]; then /usr/bin/time -v "$@"; return; fi
  local start rc; start=$(date +%s%N); "$@"; rc=$?
  echo "Elapsed (wall clock) time: $(( ($(date +%s%N) - start) / 1000000 )) ms"; return $rc
}
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
[ -f .flashmla/_flashmla_C.abi3.so ] && export GLMCHECK_FLASHMLA_LIB=$PWD/.flashmla/_flashmla_C.abi3.so
if [ -d .whl ]; then  # once per machine (two steps may run side by side)
  [ -d /tmp/site/datasets ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
  export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } \
  > "$out/versions.txt" 2>&1
case $step in
  tests)    shift 2  # optional test ids after STEP: only those (e.g. the failures of a previous run)
            python3 -m pytest -q -p no:cacheprovider -m "gpu or not gpu" "$@" 2>&1 | tee "$out/pytest.txt" | tail -n 15 ;;
  contract) GLMCHECK_MATRIX_LOG=$out/matrix.md python3 -m pytest -q -p no:cacheprovider -m "gpu or not gpu" \
              tests/test_contract_matrix.py tests/test_per_token.py tests/test_union.py tests/test_token_rows.py \
              tests/test_tiles.py tests/test_bench.py 2>&1 | tee "$out/pytest-contract.txt" | tail -n 15
            tail -n 3 "$out/matrix.md" 2>/dev/null ;;
  memcheck) bash scripts/gpu_memcheck.sh "$out" ;;
  bench)    python3 scripts/ceilings.py 2>&1 | tee "$out/ceilings.txt"
            python3 -m glmcheck bench --quiet --out "$rec/bench" 2>&1 | tee "$out/bench.txt" | tail -n 30 ;;
  benchgraph) python3 -m glmcheck bench --timing graph --pair-rounds 0 --quiet --out "$rec/bench-graph" 2>&1 \
              | tee "$out/bench-graph.txt" | tail -n 30 ;;
  benchmodel) python3 -m glmcheck bench --model glm-5.2 --layers 8 --experts 16 --tp 8 --tokens 2048,4096,8192 \
              --quiet --out "$rec/bench-model" 2>&1 | tee "$out/bench-model.txt" ;;
  model)    TRITON_CACHE_DIR=$(mktemp -d) timed python3 -m glmcheck layer0 --model glm-5.2 --tp 8 --tokens 4096 --quiet \
              --out "$rec/layer0" 2>&1 | tee "$out/layer0.txt" | grep -E "\||verdict|Elapsed|Maximum resident"
            TRITON_CACHE_DIR=$(mktemp -d) timed python3 -m glmcheck firsttoken --model glm-5.2 --layers 8 --experts 16 --tp 8 \
              --prompts natural50 --quiet --out "$rec/firsttoken" 2>&1 | tee "$out/firsttoken.txt" | grep -E "\||verdict|Elapsed" ;;
  union)    bash scripts/gpu_union_experiments.sh "$out" ;;
  builds)   timeout 300 python3 scripts/build_sweep.py --best "$out/best.json" 2>&1 | tee "$out/build.log"
            [ -f "$out/best.json" ] || echo '{}' > "$out/best.json"
            python3 scripts/bench_with_builds.py "$out/best.json" --points 1x2048:8,1x4096:8,1x8192:8,2x4096:8,4x2048:8,1x8192:16,1x8192:32 --quiet --out "$rec/bench" 2>&1 \
              | tee "$out/bench.txt" | tail -n 22 ;;
  pingpong) shift 2  # optional probe arguments after STEP, e.g. --variant consumer_regs=232
            python3 -m pytest -q -p no:cacheprovider -m "gpu or not gpu" tests/test_union.py -k pingpong 2>&1 \
              | tee "$out/pytest.txt" | tail -n 5
            python3 scripts/pingpong_probe.py --seq-len 2048 8192 --heads 8 64 "$@" 2>&1 | tee "$out/probe.txt" ;;
  pingpongtrace)
            shift 2  # optional arguments, e.g. --compute-only
            python3 scripts/pingpong_trace.py --heads 64 8 "$@" 2>&1 | tee "$out/trace.txt" ;;
  pingpongceiling)
            shift 2  # optional arguments, e.g. --variant rebuild_descriptors=1
            python3 scripts/pingpong_ceiling.py --seq-len 8192 --heads 64 8 "$@" 2>&1 | tee "$out/ceiling.txt" ;;
  accuracy) shift 2  # optional points, e.g. --points 1x8192:64 (default 1 x 8192 and 1 x 2048 at H = 64)
            python3 scripts/accuracy_fp64.py "$@" 2>&1 | tee "$out/accuracy.txt" ;;
  l2window) shift 2  # optional arguments, e.g. --heads 64
            python3 scripts/l2_window_probe.py "$@" 2>&1 | tee "$out/l2window.txt" ;;
  *) echo "unknown step $step"; exit 2 ;;
esac
