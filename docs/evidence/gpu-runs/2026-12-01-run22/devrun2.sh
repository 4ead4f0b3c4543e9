#!/usr/bin/env bash
# Device call 2: the whole suite on HEAD in 3 concurrent shards (by file), failures listed.
set -u
rm -rf /tmp/h; mkdir -p /tmp/h && tar xf headsrc.tar -C /tmp/h && cp -r .whl .flashmla /tmp/h/
cd /tmp/h
[ -d /tmp/site/datasets ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/h:/tmp/site PYTHONUNBUFFERED=1 GLMCHECK_FLASHMLA_LIB=/tmp/h/.flashmla/_flashmla_C.abi3.so
unset TRITON_INTERPRET
ls tests/test_*.py > /tmp/files
for i in 0 1 2; do
  awk -v i=$i 'NR % 3 == i' /tmp/files > /tmp/shard$i
  (timeout 520 python3 -m pytest -q -p no:cacheprovider -m "gpu or not gpu" -rfE $(cat /tmp/shard$i) > $OUT/shard$i.txt 2>&1; echo "rc $?" >> $OUT/shard$i.txt) &
done
wait
for i in 0 1 2; do echo "== shard $i"; tail -n 12 $OUT/shard$i.txt; done
