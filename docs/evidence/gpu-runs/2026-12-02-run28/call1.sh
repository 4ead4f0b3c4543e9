#!/usr/bin/env bash
# GPU run 28, call 1 (issue 43, item 2, 3, 5): the marks union build. GPU tests of the union builds and plans, the
# build table (every method gated against the merge build, eager and graph), then the bench at the H = 8, 16, 32
# points on calibrated indices and on both random walks (drift10, drift2). Carry: .flashmla.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
export GLMCHECK_FLASHMLA_LIB=$PWD/.flashmla/_flashmla_C.abi3.so
start=$(date +%s); deadline=$(( start + ${BUDGET:-540} ))
left() { echo $(( deadline - $(date +%s) )); }
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"; } > $OUT/versions.txt 2>&1
timeout 150 python3 -m pytest -q -rfE -p no:cacheprovider -m "not multigpu and not slow" \
  tests/test_union.py tests/test_union_marks.py tests/test_plan.py 2>&1 | tail -n 15 > $OUT/pytest.txt
echo "=== pytest done after $(( $(date +%s) - start )) s"; tail -n 3 $OUT/pytest.txt
timeout $(( $(left) - 300 )) python3 scripts/gpu_union_builds.py 2>&1 | tee $OUT/builds.md | tail -n 5
echo "=== builds done after $(( $(date +%s) - start )) s"
H8=1x2048:8,1x4096:8,1x8192:8,2x4096:8,4x2048:8
timeout $(( $(left) - 130 )) python3 -m glmcheck bench --quiet --pair-rounds 0 --points $H8,1x8192:16,1x8192:32 \
  --out /tmp/rec/bench-calibrated > $OUT/bench-calibrated.txt 2>&1
echo "=== bench calibrated rc $? after $(( $(date +%s) - start )) s"; cat $OUT/bench-calibrated.txt | tail -n 30
for mode in drift10 drift2; do
  timeout $(( $(left) / 2 + 20 )) python3 -m glmcheck bench --quiet --quick --pair-rounds 0 --index-mode $mode \
    --points 1x8192:8,4x2048:8,1x8192:16,1x8192:32 --out /tmp/rec/bench-$mode > $OUT/bench-$mode.txt 2>&1
  echo "=== bench $mode rc $? after $(( $(date +%s) - start )) s"; tail -n 12 $OUT/bench-$mode.txt
done
tar -C /tmp -czf $OUT/bench-records.tgz rec 2>/dev/null
