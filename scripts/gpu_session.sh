#!/usr/bin/env bash
# The GPU work, in steps of one device call each (each writes under OUTDIR, versions.txt first):
#   bash scripts/gpu_session.sh OUTDIR tests|contract|memcheck|bench|benchgraph|benchmodel|bars|barswalks|plan|capture|model|accuracy
# tests [IDS...]: the whole suite with -m "gpu or not gpu" (or only the given test ids).
# contract: the contract matrix (its table in matrix.md; GLMCHECK_MATRIX_SHARD=i/n runs a share), the
#   pool past 2**31 elements on every path, and the kernel test files.
# memcheck: compute-sanitizer memcheck over the matrix and the kernel tests (scripts/gpu_memcheck.sh).
# bench: `glmcheck bench --ceilings` (eager, its default points, paired with/without topk_length);
#   benchgraph: the same with CUDA-graph replay; benchmodel: whole-prefill and attention latency at GLM-5.2
#   width (calibrated indices, then the dummy indexer's own); plan: the union paths with a ready plan at the
#   H = 8 points, eager and graph; bars / barswalks: issue 43's bars (docs/performance.md,
#   "Against the bars"), two calls: the 12 points in one run (calibrated, eager) and the GLM-5.2 schedule at 8192; then
#   the random walks (drift10, drift2, --quick) at the H >= 16 points and paired per-token+len / FlashMLA+len rounds
#   on drift10. Their steps' limits come from BUDGET (s, default 560; keep it 20 s under the call's limit: a call
#   killed at its limit returns nothing). Run 31 (warm machine): one run ~170 s, a --quick walk ~120 s, the schedule
#   ~70 s, 4 paired points ~80 s. capture: glm-5.2 index captures at 8192 and 2 x 8192 tokens, union-stats.
# model: layer0 and firsttoken from a cold start (fresh process, empty Triton cache), with wall time.
# accuracy: the bench's backends against the fp64 reference at the H = 64 points (`bench --fp64`).
# Record directories go under $GLMCHECK_RECORDS when set (e.g. a folder tarred afterwards), else OUTDIR.
set -uo pipefail
out=${1:?usage: gpu_session.sh OUTDIR STEP}; step=${2:?STEP: tests, contract, memcheck, bench, benchgraph, benchmodel, bars, barswalks, plan, capture, model or accuracy}
rec=${GLMCHECK_RECORDS:-$out}
mkdir -p "$out" "$rec"
timed() {
  if [ -x /usr/bin/time ]; then /usr/bin/time -v "$@"; return; fi
  local start rc; start=$(date +%s%N); "$@"; rc=$?
  echo "Elapsed (wall clock) time: $(( ($(date +%s%N) - start) / 1000000 )) ms"; return $rc
}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1  # absolute: tests start fresh processes elsewhere
unset TRITON_INTERPRET
[ -f .flashmla/_flashmla_C.abi3.so ] && export GLMCHECK_FLASHMLA_LIB=$PWD/.flashmla/_flashmla_C.abi3.so
if [ -d .whl ]; then  # once per machine (two steps may run side by side)
  [ -d /tmp/site/datasets ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
  export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } \
  > "$out/versions.txt" 2>&1
deadline=$(( $(date +%s) + ${BUDGET:-560} )); left() { echo $(( deadline - $(date +%s) )); }
bench_until() {  # NAME SECONDS ARGS...: `glmcheck bench --quiet ARGS` cut at SECONDS, its record under $rec/NAME
  local name=$1 limit=$2; shift 2
  timeout "$limit" python3 -m glmcheck bench --quiet "$@" --out "$rec/$name" > "$out/$name.txt" 2>&1
  echo "=== $name rc $?, $(left) s left"; grep -E "^\| [124]x|geomean|schedule|best" "$out/$name.txt" | head -n 40
}
WIDE=1x8192:16,1x8192:32,1x8192:64,1x8192:96,1x8192:128,1x2048:64,1x2048:128
case $step in
  tests)    shift 2
            python3 -m pytest -q -rfE -p no:cacheprovider -m "gpu or not gpu" "$@" 2>&1 | tee "$out/pytest.txt" | tail -n 15 ;;
  contract) GLMCHECK_MATRIX_LOG=$out/matrix.md python3 -m pytest -q -p no:cacheprovider -m "gpu or not gpu" \
              tests/test_contract_matrix.py tests/test_per_token.py tests/test_union.py tests/test_union_marks.py tests/test_gluon.py \
              tests/test_tiles.py tests/test_token_rows.py 2>&1 | tee "$out/pytest-contract.txt" | tail -n 15
            tail -n 3 "$out/matrix.md" 2>/dev/null ;;
  memcheck) bash scripts/gpu_memcheck.sh "$out" ;;
  bench)    python3 -m glmcheck bench --ceilings --quiet --out "$rec/bench" 2>&1 | tee "$out/bench.txt" | tail -n 45 ;;
  benchgraph) python3 -m glmcheck bench --timing graph --pair-rounds 0 --quiet --out "$rec/bench-graph" 2>&1 \
              | tee "$out/bench-graph.txt" | tail -n 30 ;;
  benchmodel) for indices in calibrated model; do
              python3 -m glmcheck bench --model glm-5.2 --layers 8 --experts 16 --tp 8 --tokens 4096,8192 \
                --indices $indices --quiet --out "$rec/bench-model-$indices" 2>&1 | tee "$out/bench-model-$indices.txt"
            done ;;
  bars)     bench_until bench-calibrated $(( $(left) - 90 )) --pair-rounds 0 \
              --points 1x2048:8,1x4096:8,1x8192:8,2x4096:8,4x2048:8,$WIDE
            bench_until bench-model $(( $(left) - 5 )) --model glm-5.2 --layers 8 --experts 16 --tp 8 --tokens 8192 \
              --indices calibrated ;;
  barswalks) bench_until bench-drift10 $(( $(left) - 330 )) --quick --pair-rounds 0 --index-mode drift10 --points $WIDE
            bench_until bench-drift2 $(( $(left) - 160 )) --quick --pair-rounds 0 --index-mode drift2 --points $WIDE
            bench_until bench-paired-drift10 $(( $(left) - 5 )) --pair-rounds 5 --paired per-token+len,flashmla+len \
              --index-mode drift10 --points 1x2048:64,1x2048:128,1x8192:64,1x8192:128 ;;
  plan)     for timing in eager graph; do
              python3 -m glmcheck bench --points 1x8192:8,1x4096:8,2x4096:8 --timing $timing --pair-rounds 0 --quiet \
                --out "$rec/bench-plan-$timing" 2>&1 | tee "$out/bench-plan-$timing.txt" | tail -n 25
            done ;;
  capture)  for batch in 1 2; do
              timed python3 -m glmcheck capture-indices --model glm-5.2 --layers 8 --experts 16 --tokens 8192 \
                --batch $batch --out "/tmp/glm52-${batch}x8192.safetensors" --overwrite 2>&1 | tee "$out/capture-${batch}x8192.txt" \
                | grep -E "wrote|error|Elapsed|Maximum resident"
              python3 -m glmcheck union-stats --indices "/tmp/glm52-${batch}x8192.safetensors" --out "$rec/union-stats-$batch" \
                2>&1 | tee "$out/union-stats-${batch}x8192.txt"
            done ;;
  model)    TRITON_CACHE_DIR=$(mktemp -d) timed python3 -m glmcheck layer0 --model glm-5.2 --tp 8 --tokens 4096 --quiet \
              --out "$rec/layer0" 2>&1 | tee "$out/layer0.txt" | grep -E "\||verdict|Elapsed|Maximum resident"
            TRITON_CACHE_DIR=$(mktemp -d) timed python3 -m glmcheck firsttoken --model glm-5.2 --layers 8 --experts 16 --tp 8 \
              --prompts natural50 --quiet --out "$rec/firsttoken" 2>&1 | tee "$out/firsttoken.txt" | grep -E "\||verdict|Elapsed" ;;
  accuracy) python3 -m glmcheck bench --fp64 --points 1x8192:64,1x2048:64 --pair-rounds 0 --quiet \
              --out "$rec/bench-fp64" 2>&1 | tee "$out/accuracy.txt" | tail -n 30 ;;
  *) echo "unknown step $step"; exit 2 ;;
esac
