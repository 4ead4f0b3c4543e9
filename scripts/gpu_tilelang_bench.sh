#!/usr/bin/env bash
# Issue 74 in one device call: SGLang's TileLang prefill timed beside FlashMLA and glmcheck's paths, after the contract.
#   bash scripts/gpu_tilelang_bench.sh [OUTDIR]          (repository root of the GPU machine; OUTDIR defaults to $OUT)
# Carry .tilelang (bash scripts/get_tilelang.sh .tilelang) and .flashmla (../shared/tools/get_flashmla.sh .flashmla).
#   1. TileLang's archive unpacked to /tmp/tilelang-site (on PYTHONPATH); versions.txt.
#   2. Side by side: the contract matrix in 4 shards (test_gpu_contract_matrix: every tile, both addressing modes, every
#      head count) and one TileLang probe per head count (scripts/gpu_tilelang_probe.py: its JIT compile, kept in
#      TileLang's disk cache for the bench, and its fp32 gate, each in a process of its own, so that a crash stays
#      there). The head counts whose probe passed go to GLMCHECK_TILELANG_HEADS; the bench refuses the others.
#   3. `glmcheck bench` eager, no paired rounds, every cell gated first, in two runs (a run cut at its limit prints
#      nothing): bench-h8 at the H = 8 points of ../shared/GPU.md's table (1x2048, 1x4096, 1x8192, 2x4096, 4x2048);
#      bench-wide at 1x2048 and 1x8192 for H = 16, 32, 64, 96, 128.
#   4. bench-paired: at the 64-, 96- and 128-head points, 5 alternating rounds of best,tilelang and best,flashmla+len
#      ("best": our fastest exact path there), and each path with topk_length against it without.
#   5. summary.txt (probes, matrix, the peer tables), printed last.
# Back under OUTDIR: summary.txt, bench-h8.txt, bench-wide.txt, bench-paired.txt, logs.tgz (every log, the matrices,
# the records). A short budget: H8_POINTS / WIDE_POINTS (empty: that run skipped; a bench cut at its limit prints
# nothing, so fewer points rather than a cut), PAIRED=0 (step 4 skipped), MATRIX=0 (step 2's matrix skipped: only
# where the kernel has not changed since the matrix last passed on the GPU; the bench still gates every cell).
# BUDGET (s, default 530) bounds the whole script: keep it under the call's limit, or logs.tgz is never written.
# Estimate on an H200 (GPU run 32's timings): step 2 ~100-180 s (two matrix shards took 155 s each; a TileLang
# compile 11-21 s on a 2-core CPU), step 3 ~190 s (12 of these points took ~150 s), step 4 ~60 s: ~450 s in all.
set -uo pipefail
out=${1:-${OUT:?usage: gpu_tilelang_bench.sh OUTDIR}}
work=/tmp/tilelang-bench; logs=$work/logs; site=/tmp/tilelang-site
rm -rf "$work"  # a warm machine keeps /tmp: an earlier call's records would make `glmcheck bench --out` refuse
mkdir -p "$out" "$logs" "$work/records"
start=$(date +%s); deadline=$(( start + ${BUDGET:-530} )); left() { echo $(( deadline - $(date +%s) )); }
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
export TVM_FFI_DISABLE_TORCH_C_DLPACK=1  # tvm-ffi would JIT-build its torch addon in every process otherwise
[ -f .flashmla/_flashmla_C.abi3.so ] && export GLMCHECK_FLASHMLA_LIB=$PWD/.flashmla/_flashmla_C.abi3.so
if [ -f .tilelang/site.tar.xz ]; then
  mkdir -p "$site"
  python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter='data')" \
    .tilelang/site.tar.xz "$site" || echo "TileLang archive did not unpack"
  export PYTHONPATH=$PYTHONPATH:$site GLMCHECK_TILELANG_MODULE=$PWD/.tilelang/tilelang_kernel.py
fi
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvcc --version | tail -n 1
  git rev-parse --short HEAD 2>/dev/null
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__,
'native DLPack exchange', hasattr(torch.Tensor, '__dlpack_c_exchange_api__'))"
  python3 -c "import tilelang, tvm_ffi; print('tilelang', tilelang.__version__, 'tvm-ffi', tvm_ffi.__version__)"
  cat .tilelang/MANIFEST.txt; } > "$logs/versions.txt" 2>&1
echo "=== unpacked and versions after $(( $(date +%s) - start )) s"; head -n 6 "$logs/versions.txt"

for i in $( [ "${MATRIX:-1}" = 0 ] || echo 0 1 2 3 ); do  # MATRIX=0: no kernel change since its last GPU run
  ( GLMCHECK_MATRIX_SHARD=$i/4 GLMCHECK_MATRIX_LOG=$logs/matrix-$i.md timeout 180 python3 -m pytest -q -rfE \
      -p no:cacheprovider -m gpu tests/test_contract_matrix.py::test_gpu_contract_matrix > "$logs/pytest-matrix-$i.txt" 2>&1
    echo "exit $?" >> "$logs/pytest-matrix-$i.txt" ) &
done
for heads in 8 16 32 64 96 128; do
  ( timeout 150 python3 scripts/gpu_tilelang_probe.py $heads > "$logs/probe-$heads.txt" 2>&1
    echo "exit $?" >> "$logs/probe-$heads.txt" ) &
done
wait
passed=$(grep -h "^H=[0-9]* ok:" "$logs"/probe-*.txt | sed 's/^H=\([0-9]*\) .*/\1/' | sort -n | paste -sd, -)
export GLMCHECK_TILELANG_HEADS=${passed:-none}
echo "=== matrix and probes after $(( $(date +%s) - start )) s; TileLang runs at H = $GLMCHECK_TILELANG_HEADS"

bench_until() {  # NAME SECONDS ARGS...: `glmcheck bench --quiet ARGS` cut at SECONDS, its record under records/NAME
  local name=$1 limit=$2; shift 2
  if [ "$limit" -lt 30 ]; then echo "=== $name skipped: $limit s left for it"; return; fi
  timeout "$limit" python3 -m glmcheck bench --quiet "$@" --out "$work/records/$name" > "$logs/$name.txt" 2>&1
  echo "=== $name rc $? after $(( $(date +%s) - start )) s"; cp "$logs/$name.txt" "$out/"
}
H8_POINTS=${H8_POINTS-1x2048:8,1x4096:8,1x8192:8,2x4096:8,4x2048:8}
wide=1x2048:16,1x2048:32,1x2048:64,1x2048:96,1x2048:128,1x8192:16,1x8192:32,1x8192:64,1x8192:96,1x8192:128
WIDE_POINTS=${WIDE_POINTS-$wide}
reserve=70; [ -n "$WIDE_POINTS" ] && reserve=200  # seconds kept for the runs after bench-h8
[ -n "$H8_POINTS" ] && bench_until bench-h8 $(( $(left) - reserve )) --pair-rounds 0 --points "$H8_POINTS"
[ -n "$WIDE_POINTS" ] && bench_until bench-wide $(( $(left) - 70 )) --pair-rounds 0 --points "$WIDE_POINTS"
pairs=""
[ -n "$passed" ] && pairs="best,tilelang"
[ -n "${GLMCHECK_FLASHMLA_LIB:-}" ] && pairs="${pairs:+$pairs;}best,flashmla+len"
if [ -n "$pairs" ] && [ "${PAIRED:-1}" != 0 ]; then
  bench_until bench-paired $(( $(left) - 10 )) --pair-rounds 5 --paired "$pairs" \
    --points 1x2048:64,1x2048:128,1x8192:64,1x8192:96,1x8192:128
fi

{ echo "GPU run of scripts/gpu_tilelang_bench.sh, $(( $(date +%s) - start )) s"; head -n 6 "$logs/versions.txt"
  echo; echo "TileLang probes (one process per head count; load, first call with its compile, fp32 gate):"
  for heads in 8 16 32 64 96 128; do
    grep -m 1 "^H=" "$logs/probe-$heads.txt" || echo "H=$heads no line: $(tail -n 2 "$logs/probe-$heads.txt" | paste -sd' ')"
  done
  echo; echo "contract matrix (4 shards):"
  [ "${MATRIX:-1}" = 0 ] && echo "not run (MATRIX=0: the kernel unchanged since the matrix last passed on the GPU)"
  for i in $( [ "${MATRIX:-1}" = 0 ] || echo 0 1 2 3 ); do tail -n 1 "$logs/matrix-$i.md" 2>/dev/null || echo "shard $i: no table"
    grep -E "passed|failed|error|skipped|no tests ran|^exit" "$logs/pytest-matrix-$i.txt" | tail -n 2 | paste -sd' '; done
  for name in bench-h8 bench-wide bench-paired; do
    [ -f "$logs/$name.txt" ] || continue
    echo; echo "== $name"; grep -E "^(FlashMLA|TileLang|glmcheck bench: error)" "$logs/$name.txt"
    sed -n '/^Our fastest exact path/,/^record:/p' "$logs/$name.txt"
  done; } > "$out/summary.txt" 2>&1
tar -czf "$out/logs.tgz" -C "$work" logs records
cat "$out/summary.txt"
