# Sourced by the scripts/gpu_*.sh steps, from the repository root of a device call: the GPU, not the interpreter;
# FlashMLA from the carried .flashmla/ when present; the carried packages (.gpu-carry/site.tar.xz, built by
# scripts/make_gpu_site.sh, or wheels in .whl/), unpacked or installed once to /tmp/site, on PYTHONPATH after whatever
# the caller put there; `gpu_versions FILE` records the machine and versions; `gpu_pack OUTDIR` packs a run's files
# into one archive, since a call brings back at most 8.
unset TRITON_INTERPRET
export PYTHONUNBUFFERED=1
[ -f .flashmla/_flashmla_C.abi3.so ] && export GLMCHECK_FLASHMLA_LIB=$PWD/.flashmla/_flashmla_C.abi3.so
if [ ! -d /tmp/site/datasets ]; then
  if [ -f .gpu-carry/site.tar.xz ]; then
    mkdir -p /tmp/site && tar -xJf .gpu-carry/site.tar.xz -C /tmp/site
  elif [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
  fi
fi
if [ -d /tmp/site ]; then export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}/tmp/site; fi
gpu_versions() {  # FILE: the date, the GPU (name, driver, memory) and torch / triton / transformers to FILE, printed
  { date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
    python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__,
    'transformers', transformers.__version__)"; } > "$1" 2>&1
  cat "$1"
}
gpu_pack() {  # OUTDIR: everything under OUTDIR into OUTDIR/results.tgz, then only it and versions.txt kept there
  # (a device call brings back at most 8 files, 2 folders down; a run's records and logs are more than that)
  local dir=$1
  tar -czf /tmp/results.tgz -C "$dir" . && find "$dir" -mindepth 1 -maxdepth 1 ! -name versions.txt \
    -exec rm -rf {} + && mv /tmp/results.tgz "$dir/results.tgz"
  ls -l "$dir"
}
