#!/usr/bin/env bash
# Puts SGLang's TileLang sparse-MLA prefill into DEST (git-ignored) for the GPU machine, which reaches no index:
#   DEST/site.tar.xz           the wheels of tilelang (SGLang's pin), apache-tvm-ffi and z3-solver unpacked as pip
#                              --target would lay them out, as one xz archive (the wheels' zip is too large for one
#                              device call: 82 MB as wheels, 37 MB here). Two things of z3-solver's wheel are left
#                              out: its command-line binary (bin/z3) and the second copy of its library (libz3.so
#                              becomes a link to libz3.so.4.15, the name libtvm_compiler.so loads).
#   DEST/tilelang_kernel.py    SGLang's module, extracted as it is from the sglang wheel
#                              (sglang/kernels/ops/attention/dsa/tilelang_kernel.py); never copied into the repository
#   DEST/MANIFEST.txt          every wheel's name and sha256, the module's sha256, the Requires-Dist of each wheel
# Usage, in the repository root of a machine with the package index:  bash scripts/get_tilelang.sh .tilelang
# Then carry DEST in the device call; scripts/gpu_tilelang_bench.sh unpacks site.tar.xz to /tmp/tilelang-site and
# points GLMCHECK_TILELANG_MODULE at the module (glmcheck/backends/tilelang_sparse.py loads it by path).
# Versions: SGLANG_VERSION (default 0.5.23), TILELANG_VERSION (default 0.1.12, that release's pin), TVM_FFI_VERSION
# (0.1.11, inside tilelang 0.1.12's range), Z3_VERSION (4.15.4.0: tilelang's libraries load libz3.so.4.15). For the
# newest tilelang instead: TILELANG_VERSION=0.1.15 TVM_FFI_VERSION=0.1.12 (its range is >=0.1.11,<0.1.13).
# Takes ~3 min on two cores (xz -9); needs pip, unzip, xz.
set -euo pipefail
dest=${1:?usage: get_tilelang.sh DEST (a git-ignored folder, e.g. .tilelang)}
sglang=${SGLANG_VERSION:-0.5.23}; tilelang=${TILELANG_VERSION:-0.1.12}
tvm_ffi=${TVM_FFI_VERSION:-0.1.11}; z3=${Z3_VERSION:-4.15.4.0}
module=sglang/kernels/ops/attention/dsa/tilelang_kernel.py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fetch() {  # the GPU machine's python 3.12 on x86-64
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$tmp/wheels" "$@"
}
fetch "sglang==$sglang" "tilelang==$tilelang" "apache-tvm-ffi==$tvm_ffi" "z3-solver==$z3"
mkdir -p "$dest" "$tmp/site"
unzip -q -o "$tmp"/wheels/sglang-*.whl "$module" -d "$tmp"
cp "$tmp/$module" "$dest/tilelang_kernel.py"
for wheel in "$tmp"/wheels/tilelang-*.whl "$tmp"/wheels/apache_tvm_ffi-*.whl; do unzip -q -o "$wheel" -d "$tmp/site"; done
unzip -q -o "$tmp"/wheels/z3_solver-*.whl 'z3/*' 'z3_solver-*.dist-info/*' -d "$tmp/site"
if [ -f "$tmp/site/z3/lib/libz3.so.4.15" ]; then ln -sf libz3.so.4.15 "$tmp/site/z3/lib/libz3.so"; fi
tar -C "$tmp/site" -cf - . | xz -9 -T2 > "$dest/site.tar.xz"
{
  echo "sglang $sglang: $module"
  sha256sum "$dest/tilelang_kernel.py" | cut -d' ' -f1
  for wheel in "$tmp"/wheels/*.whl; do
    echo "$(basename "$wheel") $(sha256sum "$wheel" | cut -d' ' -f1)"
    [ "${wheel##*/sglang-}" != "${wheel##*/}" ] && continue  # sglang's own needs are not carried
    unzip -p "$wheel" '*.dist-info/METADATA' | grep '^Requires-Dist' | grep -v 'extra ==' | sed 's/^/  /'
  done
} > "$dest/MANIFEST.txt"
ls -la "$dest"
du -sb "$dest"
