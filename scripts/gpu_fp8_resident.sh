#!/usr/bin/env bash
# FP8 weights resident on one H200 (issue 69, item 5; docs/multigpu.md, "Rank rehearsal"; docs/models.md, "FP8 weights
# resident"). One device call of about 6 minutes (at most 520 s of steps, each with its own limit); the refgpu step
# reads the prompt sets with `datasets`: carry .gpu-carry (built by `bash scripts/make_gpu_site.sh`):
#   bash scripts/gpu_fp8_resident.sh OUTDIR
# 1. rehearsal: rank 0 of `--model glm-5.2 --layers 78 --tp 8 --weights fp8` alone on the GPU (dummy weights generated
#    and quantised on the device), the logits check at 4096 and at 8192 tokens (one process each: a failure at 8192
#    keeps the 4096 record) and layer0 at 4096: peak memory (allocator, device) and time per forward against
#    `glmcheck plan` and the 141 GiB; each forward's line is on stderr as it ends (OUTDIR/rehearse-*.txt).
# 2. paired: the just-in-time dequantisation's cost, resident against its bf16 twin (glm-5.2, 16 layers, rank 0 of
#    TP 8: fits both ways), 8 paired rounds at 4096 and 8192 tokens; CUDA's dequantisation against the CPU's, and the
#    twins' logits, bit for bit (scripts/gpu_fp8_resident.py paired).
# 3. refgpu: layer0 and firsttoken on ref-gpu-fp8 with --weights fp8 and bf16: rows equal (... refgpu).
# Prints a table per step and a summary last; records and logs under OUTDIR. STEPS picks steps (default all three).
# LAYERS (default 78) cuts the rehearsal's logits model to fewer layers: on an 80 GB H100, where rank 0 of all 78
# does not fit (`glmcheck plan --model glm-5.2 --tp 8 --weights fp8 --gpu-gib 80` gives the most that do, less the
# dummy build's fp32 expert stack, 24 GiB while it is quantised); PAIRED_LAYERS (default 16) the paired step's; TOKENS
# (default "4096 8192") the rehearsal's logits lengths (one process each, 120 s at 4096 and below, 140 s above).
set -uo pipefail
out=$(mkdir -p "${1:?usage: gpu_fp8_resident.sh OUTDIR}" && cd "$1" && pwd)
source scripts/gpu_env.sh
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
gpu_versions "$out/versions.txt"
rehearse() {  # NAME LIMIT ARGS...: one rehearsal, its output in OUTDIR/NAME.txt, its record in OUTDIR/rec-NAME
  local name=$1 limit=$2; shift 2; local start rc; start=$(date +%s%N)
  timeout "$limit" python3 -m glmcheck "$@" --model glm-5.2 --tp 8 --weights fp8 --rehearse-rank 0 --baseline none \
    --quiet --overwrite --format wide --out "$out/rec-$name" > "$out/$name.txt" 2>&1; rc=$?
  echo "=== $name: rc $rc (4: a rehearsal's own), $(( ($(date +%s%N) - start) / 1000000 )) ms"
  grep -E "^rank |^\| (tokens|[0-9])|^rehearsal forward|Error|error" "$out/$name.txt" | head -n 24
}
for step in ${STEPS:-rehearsal paired refgpu}; do
  case $step in
    rehearsal)
      for tokens in ${TOKENS:-4096 8192}; do
        rehearse "rehearse-logits-$tokens" $(( tokens > 4096 ? 140 : 120 )) logits --layers "${LAYERS:-78}" \
          --tokens "$tokens" --backends triton_sparse_mla --band 1
      done
      rehearse rehearse-layer0 60 layer0 --tokens 4096 --backends triton_sparse_mla ;;
    paired)
      timeout 110 python3 scripts/gpu_fp8_resident.py paired "$out" --layers "${PAIRED_LAYERS:-16}" > "$out/paired.txt" 2>&1
      echo "=== paired: rc $?"; grep -vE "^warning" "$out/paired.txt" | tail -n 12 ;;
    refgpu)
      timeout 90 python3 scripts/gpu_fp8_resident.py refgpu "$out" > "$out/refgpu.txt" 2>&1
      echo "=== refgpu: rc $?"; grep -vE "^warning" "$out/refgpu.txt" | tail -n 6 ;;
  esac
done
python3 - "$out" <<'EOF'
import json, os, sys
from pathlib import Path
out, gib = Path(sys.argv[1]), 2**30
print(f"\n=== summary: rank 0 of glm-5.2 ({os.environ.get('LAYERS', 78)} layers for logits, layer 0 for layer0), TP 8, FP8 weights resident")
print("| check | tokens | forwards | s / forward (median, max) | allocator peak | device peak | plan | "
      "allocator / plan | device / the GPU's memory | build s | held after build |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for name in ("rehearse-logits-4096", "rehearse-logits-8192", "rehearse-layer0"):
    path = out / f"rec-{name}" / "summary.json"
    if not path.exists():
        print(f"| {name} | no record (see {name}.txt) |")
        continue
    r = json.loads(path.read_text())["rehearsal"]
    for f in r["forwards"]:
        alloc = f["allocated"] or 0
        print(f"| {name.split('-')[1]} | {f['tokens']} | {f['forwards']} | {f['seconds_median']:.2f}, "
              f"{f['seconds_max']:.2f} | {alloc / gib:.1f} GiB | {f['device'] / gib:.1f} GiB | {f['plan'] / gib:.1f} GiB |"
              f" {alloc / f['plan']:.2f} | {f['device'] / r['device_bytes']:.0%} | {r['build_seconds']:.0f} | "
              f"{r['held']['total'] / gib:.1f} GiB |")
if (out / "paired.json").exists():
    p = json.loads((out / "paired.json").read_text())
    print(f"paired (glm-5.2 {os.environ.get('PAIRED_LAYERS', 16)} layers, rank 0 of TP 8): dequantisation CUDA vs CPU {p['dequant_bits_vs_cpu']}; "
          f"every resident tensor dequantised once {p['dequant_alone_s'] * 1e3:.0f} ms; "
          + "; ".join(f"{t} tokens: logits resident = bf16 {v['logits_equal']}, resident - bf16 "
                      f"{v['diff_mean'] * 1e3:+.0f} ms [{v['diff_low'] * 1e3:+.0f}, {v['diff_high'] * 1e3:+.0f}]"
                      for t, v in p["lengths"].items()))
if (out / "refgpu.json").exists():
    g = json.loads((out / "refgpu.json").read_text())
    print("ref-gpu-fp8, --weights fp8 against bf16: " + "; ".join(
        f"{c}: rows equal {v['rows_equal']}, per-backend rows equal {v['extra_equal']}, verdicts {v['verdicts']}"
        for c, v in g.items()))
EOF
gpu_pack "$out"
