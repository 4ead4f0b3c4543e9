#!/usr/bin/env bash
# Compile every Gluon kernel configuration that the launchers can pick for sm_90a, on a machine
# without a GPU (CI runs it after the tests). The CPU interpreter does not run Gluon, so without
# this a kernel that no longer compiles lands unnoticed until a GPU session (run 14, call 1: a
# helper returning None failed every ping-pong launch). Uses triton 3.6, the Gluon version the
# tiles are tested with (GLUON_TESTED_VERSIONS), in its own venv: no torch needed.
#   bash scripts/gluon_compile_check.sh [VENV]   (default .venv-gluon; reused when present)
set -euo pipefail
cd "$(dirname "$0")/.."
unset TRITON_INTERPRET  # compile for the GPU target (CI exports it for the tests; the interpreter needs numpy)
venv=${1:-.venv-gluon}
has_triton36() { "$venv/bin/python" -c "import triton; assert triton.__version__.startswith('3.6')" 2>/dev/null; }
if [ ! -x "$venv/bin/python" ] || ! has_triton36; then
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q triton==3.6.0
fi
failed=0
# Each configuration must compile and its consumer loops (those that issue warpgroup MMAs) must
# not spill registers to local memory (run 16, note 59: spilled wgmma descriptors cost 5-11 %).
check() {
  if out=$("$venv/bin/python" scripts/ws_compile.py "$@" --no-consumer-spills 2>&1); then
    echo "compiles: ${out%%, setmaxnreg*}"
  else
    echo "FAILED: scripts/ws_compile.py $* --no-consumer-spills" >&2
    echo "$out" | grep -E 'Error|spill|LDL [1-9]|STL [1-9]' | head -n 6 >&2
    failed=1
  fi
}
# Every configuration a launcher can pick, in both KV addressing modes (int64 row offsets past 2**31
# KV elements: a form never compiled crashed on the first large pool, issue 29).
for wide in "" --kv-int64; do
  for heads in 8 16 32; do check --tile split --heads "$heads" $wide; done
  check --tile split --heads 8 --longest-first $wide
  check --tile pingpong --heads 8 --longest-first $wide  # union 8
  # the per-token form: 64 heads, one slice; padded (17..63); two slices, padded and whole
  for heads in 64 17 100 128; do check --tile pingpong --token-heads "$heads" --longest-first $wide; done
done
# diagnostics (scripts/pingpong_trace.py, scripts/pingpong_ceiling.py), int32 rows only
for heads in 64 8; do check --tile pingpong --heads "$heads" --trace; done
for diag in 1 2; do check --tile pingpong --heads 64 --diag "$diag"; done
check --tile pingpong --heads 64 --diag 2 --trace
[ "$failed" = 0 ] || { echo "gluon_compile_check: a Gluon kernel does not compile for sm_90a or spills in a consumer loop" >&2; exit 1; }
echo "gluon_compile_check: every Gluon kernel configuration compiles for sm_90a in both addressing modes, no consumer loop spills"
