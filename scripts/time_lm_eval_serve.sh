#!/usr/bin/env bash
# What `lm_eval --limit N` costs against `glmcheck serve` (docs/tasks.md, "What lm-eval against serve costs"): starts
# `glmcheck serve --model MODEL --backend BACKEND`, writes glmcheck's own task (`glmcheck tasks --write-yaml`) and runs
# the lm_eval command that prints (batch size 8, 4 requests in flight, --output_path --log_samples), timed.
#   bash scripts/time_lm_eval_serve.sh [MODEL=ref-cpu] [BACKEND=triton_sparse_mla] [LIMIT=20]
# Prints one line: "lm_eval --limit N against glmcheck serve MODEL/BACKEND on DEVICE: S s for R requests (P s a
# request), acc A". On the H200 carry lm-eval and the server's packages as .gpu-carry/site.tar.xz, built by
# `bash scripts/make_gpu_site.sh`; the device is the server's default (cuda there, the CPU and Triton's interpreter
# here).
set -uo pipefail
MODEL=${1:-ref-cpu}; BACKEND=${2:-triton_sparse_mla}; LIMIT=${3:-20}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
if [ -f .gpu-carry/site.tar.xz ]; then
  mkdir -p /tmp/site && tar -xJf .gpu-carry/site.tar.xz -C /tmp/site || exit
  export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
work=$(mktemp -d)
python3 -m glmcheck serve --model "$MODEL" --backend "$BACKEND" --port 0 --log-requests > "$work/serve.out" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$work"' EXIT
until grep -q "http://" "$work/serve.out"; do
  kill -0 $server 2>/dev/null || { echo "the server died:"; tail -5 "$work/serve.out"; exit 1; }
  sleep 1
done
url=$(grep -o 'http://[0-9.:]*' "$work/serve.out" | head -1)
device=$(python3 -c "import json,urllib.request; print(json.load(urllib.request.urlopen('$url/glmcheck/info'))['device'])")
command=$(python3 -m glmcheck tasks --write-yaml "$work/tasks" --model "$MODEL" | grep '^run them with: ' \
          | sed -e 's/^run them with: //' -e "s|http://HOST:PORT|$url|" -e "s|model=MODEL|model=$MODEL|" \
                -e "s|--output_path OUT|--output_path $work/out|")
echo "$command --limit $LIMIT"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
start=$(date +%s.%N)
python3 -m lm_eval ${command#lm_eval } --limit "$LIMIT" > "$work/lm_eval.out" 2>&1 || { tail -20 "$work/lm_eval.out"; exit 1; }
end=$(date +%s.%N)
grep "^|" "$work/lm_eval.out"  # lm-eval's table
requests=$(grep -c 'POST /v1/completions' "$work/serve.out")
acc=$(grep -m1 '|acc ' "$work/lm_eval.out" | awk -F'|' '{gsub(/ /, "", $8); print $8}')
python3 -c "s=$end-$start; print(f'lm_eval --limit $LIMIT against glmcheck serve $MODEL/$BACKEND on $device: {s:.0f} s for $requests requests ({s/max($requests,1):.1f} s a request), acc ${acc:-?}')"
