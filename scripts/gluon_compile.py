"""Compile the Gluon union tile (ping-pong) for sm_90a without a GPU, as the launcher launches it, and print its
resources.

Usage (any machine with triton 3.6, no GPU or torch needed; 3.9 renamed a Gluon call it uses):
    python scripts/gluon_compile.py [--heads 8] [--token-heads N] [--kv-int64]
        [--ptx out.ptx] [--code-ptx out.ptx] [--sass out.sass] [--no-consumer-spills]
--heads H: a union tile of G = 64 / H tokens; --token-heads N: the per-token form
(G = 1) for N heads, run as ceil(N / 64) slices of 64. Prints registers per thread, spills, shared
memory and the wgmma / cp.async counts of the PTX; with --no-consumer-spills also each loop that
issues warpgroup MMAs, and exits 1 if one of them loads or stores local memory (sass_loops.py).
--code-ptx writes the PTX without its debug information (source lines, files, inline-scope labels): equal
files from two revisions mean the same code, so a refactor of a Gluon kernel can be checked without a GPU.
"""

from __future__ import annotations

import argparse
import importlib
import pathlib
import re
import subprocess
import sys
import tempfile
import types

import triton
from sass_loops import consumer_spills, loops  # scripts/ is on sys.path
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource

PACKAGE_DIR = pathlib.Path(__file__).resolve().parents[1] / "glmcheck"
SHARED_SIGNATURE = {
    "q_ptr": "*bf16", "kv_ptr": "*bf16", "rows_ptr": "*i32", "bits_ptr": "*u8", "len_ptr": "*i32",
    "out_ptr": "*bf16", "stride_qt": "i32", "stride_qh": "i32", "stride_qd": "constexpr",
    "stride_kvs": "i32", "stride_rg": "i32", "stride_bg": "i32", "stride_ot": "i32", "stride_oh": "i32",
    "stride_od": "constexpr", "qk_scale_log2": "fp32",
}


def import_gluon_module(name: str) -> types.ModuleType:
    """glmcheck.kernels.gluon.<name>, imported without running the glmcheck and glmcheck.kernels
    package initialisers (they need torch; this script does not): stand-in packages with the real
    paths take their place."""
    for package, path in (("glmcheck", PACKAGE_DIR), ("glmcheck.kernels", PACKAGE_DIR / "kernels")):
        if package not in sys.modules:
            stub = types.ModuleType(package)
            stub.__path__ = [str(path)]
            sys.modules[package] = stub
    return importlib.import_module(f"glmcheck.kernels.gluon.{name}")


def cuobjdump(cubin: bytes, flag: str) -> str:
    """cuobjdump (shipped with triton) `flag` output for a cubin."""
    tool = pathlib.Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as handle:
        handle.write(cubin)
        handle.flush()
        return subprocess.run([str(tool), flag, handle.name], capture_output=True, text=True, check=True).stdout


DEBUG_LINE = re.compile(r"^\s*(\.loc|\.file)\b|^\$L__tmp\d+:$")


def code_ptx(ptx: str) -> str:
    """The PTX without its debug information: `.loc` and `.file` lines, inline-scope labels ($L__tmpN, which
    only the debug sections use) and the `.section .debug_*` blocks at the end."""
    code = []
    for line in ptx.splitlines():
        if re.match(r"\s*\.section\s+\.debug", line):
            break
        if not DEBUG_LINE.match(line):
            code.append(line)
    return "\n".join(code) + "\n"


def resource_usage(cubin: bytes) -> str:
    """REG / STACK / LOCAL of the cubin, as cuobjdump reports them."""
    text = cuobjdump(cubin, "--dump-resource-usage")
    found = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", text)
    return f"REG {found[1]} STACK {found[2]} LOCAL {found[4]}" if found else text.strip()


def kernel_source(ns: argparse.Namespace) -> tuple[GluonASTSource, int]:
    """The Gluon source to compile for the options and the launch's num_warps."""
    constants = import_gluon_module("constants")
    module = import_gluon_module("pingpong")
    heads = 64 if ns.token_heads else ns.heads  # tile rows per token
    constexprs = {"stride_qd": 1, "stride_od": 1, "H": heads, "G": 64 // heads, "D_V": 512, "D_TAIL": 64,
                  "BLOCK_N": constants.BLOCK_N, "KV_INT64": ns.kv_int64}
    shared = import_gluon_module("pingpong_shared")
    kernel, num_warps = module.sparse_mla_union_pingpong_kernel, shared.WARPGROUP_WARPS.value
    constexprs |= {"CONSUMER_REGS": constants.PINGPONG_CONSUMER_REGS,
                   "HEAD_SLICES": -(-ns.token_heads // 64) if ns.token_heads else 1,
                   "PARTIAL_HEADS": bool(ns.token_heads % 64)}
    kinds = SHARED_SIGNATURE | {"num_heads": "i32"}
    signature = {name: kinds.get(name, "constexpr") for name in kernel.arg_names}  # the kernel's order
    missing = set(constexprs) - set(signature)
    if missing or {n for n, kind in signature.items() if kind == "constexpr"} - set(constexprs):
        raise SystemExit(f"gluon_compile.py and the kernel's parameters disagree: {sorted(missing)}")
    # What the JIT infers at a real launch: 16-byte aligned pointers, strides that are multiples of 16.
    aligned = [i for i, (name, kind) in enumerate(signature.items()) if kind.startswith("*") or
               (kind == "i32" and name.startswith("stride"))]
    attrs = {(i,): [["tt.divisibility", 16]] for i in aligned}
    return GluonASTSource(kernel, signature=signature, constexprs=constexprs, attrs=attrs), num_warps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--heads", type=int, default=8, help="tile heads of a union tile (G = 64 / heads)")
    parser.add_argument("--token-heads", type=int, default=0,
                        help="the per-token form (G = 1) for this many heads; replaces --heads")
    parser.add_argument("--kv-int64", action="store_true", help="int64 KV row offsets (KV_INT64=True)")
    parser.add_argument("--ptx", help="also write the PTX here")
    parser.add_argument("--code-ptx", help="also write the PTX without debug information here (`code_ptx`)")
    parser.add_argument("--sass", help="also write the SASS (cuobjdump -sass) here")
    parser.add_argument("--no-consumer-spills", action="store_true",
                        help="print each loop that issues warpgroup MMAs and exit 1 if one of them loads or "
                             "stores local memory (register spills; scripts/sass_loops.py)")
    ns = parser.parse_args()
    source, num_warps = kernel_source(ns)
    kernel = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps})
    ptx = kernel.asm["ptx"]
    shape = f"token_heads={ns.token_heads}" if ns.token_heads else f"heads={ns.heads}"
    print(f"pingpong {shape} kv_int64={ns.kv_int64}: {resource_usage(kernel.asm['cubin'])}, "
          f"shared {kernel.metadata.shared} B, wgmma {len(re.findall(r'wgmma.mma_async', ptx))}, "
          f"cp.async {len(re.findall(r'cp.async.cg|cp.async.ca', ptx))}, "
          f"setmaxnreg {re.findall(r'setmaxnreg[^;]*', ptx)}")
    if ns.ptx:
        pathlib.Path(ns.ptx).write_text(ptx)
    if ns.code_ptx:
        pathlib.Path(ns.code_ptx).write_text(code_ptx(ptx))
    sass = cuobjdump(kernel.asm["cubin"], "-sass") if ns.sass or ns.no_consumer_spills else ""
    if ns.sass:
        pathlib.Path(ns.sass).write_text(sass)
    if ns.no_consumer_spills:
        stats = loops(sass)
        for loop in stats:
            if loop.wgmma:
                print(f"  {loop.describe()}")
        spilled = consumer_spills(stats)
        if spilled:
            print(f"{len(spilled)} consumer loop(s) spill registers to local memory", file=sys.stderr)
            sys.exit(1)


if __name__ == "__main__":
    main()
