#!/usr/bin/env bash
# Compile every Gluon kernel configuration that the launchers can pick for sm_90a, on a machine
# without a GPU (CI runs it beside the tests). The CPU interpreter does not run Gluon, so without
# this a kernel that no longer compiles lands unnoticed until a GPU session. Uses triton 3.6, the Gluon version the
# tiles are tested with (GLUON_TESTED_VERSIONS), in its own venv: no torch needed.
#   bash scripts/gluon_compile_check.sh [VENV] [PTX_DIR]   (default .venv-gluon; reused when present)
# With PTX_DIR each configuration's PTX without debug information goes to PTX_DIR/<configuration>.ptx: run it
# on two revisions and `diff -r` the folders to check that a refactor of the Gluon code changes no instruction.
set -euo pipefail
cd "$(dirname "$0")/.."
unset TRITON_INTERPRET  # compile for the GPU target (CI exports it for the tests; the interpreter needs numpy)
venv=${1:-.venv-gluon}
ptx_dir=${2:-}
[ -z "$ptx_dir" ] || mkdir -p "$ptx_dir"
has_triton36() { "$venv/bin/python" -c "import triton; assert triton.__version__.startswith('3.6')" 2>/dev/null; }
if [ ! -x "$venv/bin/python" ] || ! has_triton36; then
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q triton==3.6.0
fi
failed=0
# Each configuration must compile and its consumer loops (those that issue warpgroup MMAs) must
# not spill registers to local memory (spilled wgmma descriptors cost 5-11 %: docs/performance.md,
# "Wgmma descriptors built in the loop").
check() {
  local ptx=()
  [ -z "$ptx_dir" ] || ptx=(--code-ptx "$ptx_dir/$(echo "$*" | sed 's/--//g; s/ /_/g').ptx")
  if out=$("$venv/bin/python" scripts/gluon_compile.py "$@" "${ptx[@]}" --no-consumer-spills 2>&1); then
    echo "compiles: ${out%%, setmaxnreg*}"
  else
    echo "FAILED: scripts/gluon_compile.py $* --no-consumer-spills" >&2
    echo "$out" | grep -E 'Error|spill|LDL [1-9]|STL [1-9]' | head -n 6 >&2
    failed=1
  fi
}
# Every configuration a launcher can pick, in both KV addressing modes (int64 row offsets past 2**31
# KV elements: a form never compiled crashed on the first large pool).
for wide in "" --kv-int64; do
  # union 8 at 8 heads, union 4 at 16, union 2 at 32
  for heads in 8 16 32; do check --heads "$heads" $wide; done
  # the per-token form: 64 heads, one slice; padded (17..63); two slices, padded and whole
  for heads in 64 17 100 128; do check --token-heads "$heads" $wide; done
done
[ "$failed" = 0 ] || { echo "gluon_compile_check: a Gluon kernel does not compile for sm_90a or spills in a consumer loop" >&2; exit 1; }
echo "gluon_compile_check: every Gluon kernel configuration compiles for sm_90a in both addressing modes, no consumer loop spills"
