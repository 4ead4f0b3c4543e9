#!/usr/bin/env bash
# compute-sanitizer memcheck over the kernel tests on the GPU (the contract matrix, per-token, union
# attention, union build), with -1 and out-of-range indices and ragged topk_length (the CPU-shape
# tests run on CUDA tensors there; the matrix's table goes to matrix-memcheck.md). The real-shape
# tests are left out: memcheck slows kernels 10-100x.
# Usage (GPU machine, repository root): bash scripts/gpu_memcheck.sh [OUTDIR]
set -uo pipefail
out=${1:-${OUT:-/tmp/glmcheck-memcheck}}
mkdir -p "$out"
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
GLMCHECK_MATRIX_LOG=$out/matrix-memcheck.md \
compute-sanitizer --tool memcheck --target-processes all --error-exitcode 86 --log-file "$out/memcheck.log" \
  python3 -m pytest -q -p no:cacheprovider -m "gpu or not gpu" tests/test_contract_matrix.py tests/test_per_token.py \
  tests/test_union.py tests/test_union_marks.py tests/test_gluon.py tests/test_bad_input_matrix.py \
  -k "not real_shape and not int64_addressing and not graph_capture and not past_int32" \
  2>&1 | tee "$out/memcheck-pytest.txt" | tail -n 5
status=${PIPESTATUS[0]}
grep -E "ERROR SUMMARY|Invalid|out of bounds" "$out/memcheck.log" | tail -n 20
echo "memcheck exit status: $status (86 = sanitizer found errors)"
