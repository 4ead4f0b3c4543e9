#!/usr/bin/env bash
# Device call 3 (issue 32): the default logits run over seeds 0-4, the default FP8 layer0 run, and the
# verdict rates on tiny (20 seeds) with the band gate, from this working tree.
set -u
[ -d /tmp/site/datasets ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 GLMCHECK_FLASHMLA_LIB=$PWD/.flashmla/_flashmla_C.abi3.so
unset TRITON_INTERPRET
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; git log --oneline -1 2>/dev/null
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"; } > $OUT/versions.txt 2>&1
start=$(date +%s)
logits() { timeout $2 python3 -m glmcheck logits --model glm-5.2 --layers 8 --experts 16 --tp 8 \
  --tokens 2048,4096,8192 --seed $1 --quiet --out $OUT/logits-seed$1 > $OUT/logits-seed$1.txt 2>&1; echo "rc $? wall $(( $(date +%s) - start ))" >> $OUT/logits-seed$1.txt; }
(timeout 300 python3 -m glmcheck layer0 --model glm-5.2 --tp 8 --tokens 4096 --kv-cache-dtype fp8_e4m3 --quiet \
  --out $OUT/layer0-fp8 > $OUT/layer0-fp8.txt 2>&1; echo "rc $? wall $(( $(date +%s) - start ))" >> $OUT/layer0-fp8.txt) &
(timeout 540 python3 -m glmcheck selftest --model tiny --seeds 20 --tokens 64 --quiet > $OUT/rates-tiny.txt 2>&1;
  echo "rc $? wall $(( $(date +%s) - start ))" >> $OUT/rates-tiny.txt) &
logits 0 540 & p0=$!; logits 1 540 & p1=$!; logits 2 540 & p2=$!
wait $p0 $p1 $p2
left=$(( 560 - ($(date +%s) - start) ))
echo "after seeds 0-2: $(( $(date +%s) - start )) s"
if [ $left -gt 120 ]; then logits 3 $left & logits 4 $left & fi
wait
for f in $OUT/*.txt; do echo "== $f"; grep -E "verdict|band \(|rc |FAIL|Error|error" $f | head -12; done
find $OUT -name "*.safetensors" -delete
