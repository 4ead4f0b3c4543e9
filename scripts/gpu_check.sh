#!/usr/bin/env bash
# GPU check (H200): environment, the full test suite including -m gpu, then the timing table.
# Run from the repository root on the GPU machine:  bash scripts/gpu_check.sh [OUTDIR]
# FlashMLA is used when .flashmla/_flashmla_C.abi3.so exists (../shared/tools/get_flashmla.sh).
set -uo pipefail
out=${1:-${OUT:-/tmp/glmcheck-gpu}}; shift || true
mkdir -p "$out"
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
[ -f .flashmla/_flashmla_C.abi3.so ] && export GLMCHECK_FLASHMLA_LIB=$PWD/.flashmla/_flashmla_C.abi3.so
{
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch, triton, transformers; print("torch", torch.__version__, "triton", triton.__version__, "transformers", transformers.__version__, "capability", torch.cuda.get_device_capability())'
  git rev-parse --short HEAD 2>/dev/null || true
} 2>&1 | tee "$out/env.txt"
python3 -m pytest -q -m "gpu or not gpu" -p no:cacheprovider 2>&1 | tee "$out/pytest.txt" | tail -n 25
python3 -m glmcheck bench --out "$out/bench" --quiet "$@" 2>&1 | tee "$out/bench.txt" | tail -n 40
