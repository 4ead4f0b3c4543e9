#!/usr/bin/env bash
# GPU run 25, call 1: train both reference models (issue 40) from the committed recipe.
# Carry: .whl (datasets wheels), .corpus (the corpus file made here by
# `python scripts/train_reference_model.py --save-corpus .corpus/stdlib.jsonl.gz`, Python 3.11.7).
# Each checkpoint comes back as a tar split in 15 MB parts (the device returns files <= 16 MiB).
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=$PYTHONPATH:/tmp/site
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, transformers, tokenizers; print('torch', torch.__version__, 'transformers', transformers.__version__, 'tokenizers', tokenizers.__version__)"; } | tee $OUT/versions.txt
for name in ${MODELS:-ref-gpu ref-cpu}; do
  timeout ${BUDGET:-560} python3 scripts/train_reference_model.py $name --out /tmp/train-$name \
    --corpus .corpus/stdlib.jsonl.gz --quiet 2>&1 | grep -v "Loading weights\|Writing model" | tee $OUT/train-$name.log
  if [ -f /tmp/train-$name/checkpoint/training_record.json ]; then
    cp /tmp/train-$name/heldout.jsonl.gz /tmp/train-$name/checkpoint/
    tar -C /tmp/train-$name -cf - checkpoint | split -b 15M - $OUT/$name.tar.part-
  fi
  nvidia-smi --query-gpu=memory.used --format=csv,noheader
done
ls -la $OUT
