#!/usr/bin/env bash
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1; unset TRITON_INTERPRET
export GLMCHECK_FLASHMLA_LIB=$PWD/.flashmla/_flashmla_C.abi3.so
[ -d /tmp/site/datasets ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:/tmp/site
O=${OUT:-/tmp/out}; mkdir -p $O
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > $O/versions.txt 2>&1
timeout 100 python3 -m pytest -q -rfE -p no:cacheprovider -m "gpu or not gpu" tests/test_gluon_half_pairs.py > $O/pytest-half-pairs.txt 2>&1
tail -n 3 $O/pytest-half-pairs.txt
timeout 440 python3 -m glmcheck bench --quiet --paired per-token+len,flashmla+len --pair-rounds 5 --out /tmp/bench > $O/bench.txt 2>&1
echo "bench exit $?"; tar czf $O/bench-record.tgz -C /tmp bench 2>/dev/null
tail -n 60 $O/bench.txt
