#!/usr/bin/env bash
# Device call 4: the whole suite on the working tree (commit d81b671, issue 32 included) in 3 concurrent shards.
set -u
[ -d /tmp/site/datasets ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 GLMCHECK_FLASHMLA_LIB=$PWD/.flashmla/_flashmla_C.abi3.so
unset TRITON_INTERPRET
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $OUT/versions.txt 2>&1
ls tests/test_*.py > /tmp/files
for i in 0 1 2; do
  awk -v i=$i 'NR % 3 == i' /tmp/files > /tmp/shard$i
  (timeout 400 python3 -m pytest -q -p no:cacheprovider -m "gpu or not gpu" -rfE $(cat /tmp/shard$i) > $OUT/shard$i.txt 2>&1; echo "rc $?" >> $OUT/shard$i.txt) &
done
wait
for i in 0 1 2; do echo "== shard $i"; grep -E "^FAILED|passed|failed|^rc" $OUT/shard$i.txt; done
