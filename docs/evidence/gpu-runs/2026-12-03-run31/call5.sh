#!/usr/bin/env bash
# GPU run 31, call 5 (issue 43): the staged write-out as the kernel: the 128-case matrix in two shards beside
# compute-sanitizer memcheck over the Gluon GPU tests, then paired bench rounds per-token+len / FlashMLA+len at the
# 64- and 128-head points (calibrated, then drift10). Carry: .flashmla.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export GLMCHECK_FLASHMLA_LIB=$PWD/.flashmla/_flashmla_C.abi3.so
start=$(date +%s); deadline=$(( start + ${BUDGET:-440} )); left() { echo $(( deadline - $(date +%s) )); }
{ date -u; git log --oneline -1 2>/dev/null; } > $OUT/versions.txt 2>&1
PY="python3 -m pytest -q -rfE -p no:cacheprovider -m 'not multigpu and not slow'"
for i in 0 1; do
  ( GLMCHECK_MATRIX_SHARD=$i/2 GLMCHECK_MATRIX_LOG=$OUT/matrix-$i.md timeout 200 \
      bash -c "$PY tests/test_contract_matrix.py::test_gpu_contract_matrix" > $OUT/pytest-matrix-$i.txt 2>&1
    echo "exit $?" >> $OUT/pytest-matrix-$i.txt ) &
done
( timeout 200 compute-sanitizer --tool memcheck --target-processes all --error-exitcode 86 --log-file $OUT/memcheck.log \
    python3 -m pytest -q -rfE -p no:cacheprovider -m gpu tests/test_gluon.py tests/test_gluon_half_pairs.py > $OUT/memcheck-pytest.txt 2>&1
  echo "exit $?" >> $OUT/memcheck-pytest.txt ) &
wait
echo "=== tests after $(( $(date +%s) - start )) s"
for f in $OUT/pytest-*.txt $OUT/memcheck-pytest.txt; do echo "== $f"; tail -n 2 $f; done
grep "ERROR SUMMARY" $OUT/memcheck.log | tail -n 1
for i in 0 1; do tail -n 2 $OUT/matrix-$i.md; done
for mode in calibrated drift10; do
  timeout $(( ($(left) - 5) / 2 )) python3 -m glmcheck bench --quiet --pair-rounds 5 --paired per-token+len,flashmla+len \
    --index-mode $mode --points 1x2048:64,1x2048:128,1x8192:64,1x8192:128 --out /tmp/rec/bench-paired-$mode > $OUT/bench-paired-$mode.txt 2>&1
  echo "=== bench paired $mode rc $? after $(( $(date +%s) - start )) s"; grep -i -A8 "paired" $OUT/bench-paired-$mode.txt | tail -n 9
done
tar -C /tmp -czf $OUT/bench-records.tgz rec 2>/dev/null
