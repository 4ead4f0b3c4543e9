"""Compile the warp-specialised union kernel for sm_90a without a GPU and print its resources.

Usage (any machine with triton 3.6, no GPU or torch needed; 3.9 renamed a Gluon call it uses):
    python scripts/ws_compile.py [--tile split|pingpong] [--block-n 64] [--stages 2] [--heads 8]
        [--token-heads N] [--kv-int64] [--producer-warps 4] [--consumer-regs 224] [--trace]
        [--ptx out.ptx] [--sass out.sass] [--no-consumer-spills]
Prints registers per thread, spills, shared memory and the wgmma / cp.async counts of the PTX;
with --no-consumer-spills also each loop that issues warpgroup MMAs, and exits 1 if one of them
loads or stores local memory (scripts/sass_loops.py).
"""

from __future__ import annotations

import argparse
import importlib.util
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

KERNELS_DIR = pathlib.Path(__file__).resolve().parents[1] / "glmcheck" / "kernels"
TILE_FILES = {"split": "union_ws", "pingpong": "union_pingpong"}


def load_kernel_module(name: str):
    """One kernel file, as glmcheck.kernels.<name>, without running the packages' __init__ (the
    glmcheck package needs torch; this script does not). Empty stand-in packages take their place."""
    for package in ("glmcheck", "glmcheck.kernels"):
        if package not in sys.modules:
            stub = types.ModuleType(package)
            stub.__path__ = []
            sys.modules[package] = stub
    qualified = f"glmcheck.kernels.{name}"
    if qualified in sys.modules:
        return sys.modules[qualified]
    spec = importlib.util.spec_from_file_location(qualified, KERNELS_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[qualified] = module
    spec.loader.exec_module(module)
    return module


def cuobjdump(cubin: bytes, flag: str) -> str:
    """cuobjdump (shipped with triton) `flag` output for a cubin."""
    tool = pathlib.Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as handle:
        handle.write(cubin)
        handle.flush()
        return subprocess.run([str(tool), flag, handle.name], capture_output=True, text=True, check=True).stdout


def resource_usage(cubin: bytes) -> str:
    """REG / STACK / SHARED of the cubin, as cuobjdump reports them."""
    text = cuobjdump(cubin, "--dump-resource-usage")
    found = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", text)
    return f"REG {found[1]} STACK {found[2]} LOCAL {found[4]}" if found else text.strip()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tile", choices=sorted(TILE_FILES), default="split",
                        help="split: union_ws (warpgroups split the columns); pingpong: union_pingpong")
    parser.add_argument("--block-n", type=int, default=64)
    parser.add_argument("--stages", type=int, default=2, help="split tile only (ping-pong has two)")
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--producer-warps", type=int, default=4)
    parser.add_argument("--producer-regs", type=int, default=56)
    parser.add_argument("--consumer-regs", type=int, default=224, help="ping-pong tile only: each consumer's")
    parser.add_argument("--trace", action="store_true", help="ping-pong: TRACE=True (clock64 stamps)")
    parser.add_argument("--ptx", help="also write the PTX here")
    parser.add_argument("--sass", help="also write the SASS (cuobjdump -sass) here")
    parser.add_argument("--longest-first", action="store_true", help="compile with LONGEST_FIRST=True")
    parser.add_argument("--token-heads", type=int, default=0,
                        help="ping-pong only: the per-token form (G = 1) for this many heads, run as "
                             "ceil(N / 64) slices of 64 (padded when N is not a multiple of 64); "
                             "replaces --heads")
    parser.add_argument("--kv-int64", action="store_true", help="compile with KV_INT64=True (int64 KV row offsets)")
    parser.add_argument("--diag", type=int, default=0, help="ping-pong: DIAG (0 the kernel, 1 gather only, "
                                                             "2 compute only; diagnostic)")
    parser.add_argument("--no-consumer-spills", action="store_true",
                        help="print each loop that issues warpgroup MMAs and exit 1 if one of them loads or "
                             "stores local memory (register spills; scripts/sass_loops.py)")
    ns = parser.parse_args()
    load_kernel_module("union_ws")  # the ping-pong file imports a helper from it
    module = load_kernel_module(TILE_FILES[ns.tile])
    signature = {
        "q_ptr": "*bf16", "kv_ptr": "*bf16", "rows_ptr": "*i32", "bits_ptr": "*u8", "len_ptr": "*i32",
        "out_ptr": "*bf16", "stride_qt": "i32", "stride_qh": "i32", "stride_qd": "constexpr",
        "stride_kvs": "i32", "stride_rg": "i32", "stride_bg": "i32", "stride_ot": "i32", "stride_oh": "i32",
        "stride_od": "constexpr", "qk_scale_log2": "fp32", "num_heads": "i32",
        "H": "constexpr", "G": "constexpr", "D_V": "constexpr", "D_TAIL": "constexpr", "BLOCK_N": "constexpr",
        "NUM_STAGES": "constexpr", "PRODUCER_WARPS": "constexpr", "PRODUCER_REGS": "constexpr",
        "CONSUMER_REGS": "constexpr", "KV_INT64": "constexpr", "LONGEST_FIRST": "constexpr",
        "HEAD_SLICES": "constexpr", "PARTIAL_HEADS": "constexpr",
        "trace_ptr": "*i64", "TRACE": "constexpr", "DIAG": "constexpr",
    }
    heads = 64 if ns.token_heads else ns.heads  # tile rows per token
    slices = -(-ns.token_heads // 64) if ns.token_heads else 1
    constexprs = {"stride_qd": 1, "stride_od": 1, "H": heads, "G": module.BLOCK_M.value // heads, "D_V": 512,
                  "D_TAIL": 64, "BLOCK_N": ns.block_n, "NUM_STAGES": ns.stages,
                  "PRODUCER_WARPS": ns.producer_warps, "PRODUCER_REGS": ns.producer_regs,
                  "CONSUMER_REGS": ns.consumer_regs, "KV_INT64": ns.kv_int64, "LONGEST_FIRST": ns.longest_first,
                  "TRACE": ns.trace, "DIAG": ns.diag, "HEAD_SLICES": slices,
                  "PARTIAL_HEADS": bool(ns.token_heads % 64)}
    if ns.tile == "split":
        kernel_fn, num_warps = module.sparse_mla_union_ws_kernel, module.CONSUMER_WARPS.value
        del signature["CONSUMER_REGS"], constexprs["CONSUMER_REGS"]
        del signature["TRACE"], constexprs["TRACE"], signature["trace_ptr"]
        del signature["DIAG"], constexprs["DIAG"], signature["num_heads"]
        del signature["HEAD_SLICES"], constexprs["HEAD_SLICES"], signature["PARTIAL_HEADS"], constexprs["PARTIAL_HEADS"]
    else:
        kernel_fn = module.sparse_mla_union_pingpong_kernel
        num_warps = module.WARPGROUP_WARPS.value
        for name in ("NUM_STAGES", "PRODUCER_WARPS", "PRODUCER_REGS"):
            del signature[name], constexprs[name]
    # What the JIT infers at a real launch: 16-byte aligned pointers, strides that are multiples of 16.
    aligned = [i for i, (name, kind) in enumerate(signature.items()) if kind.startswith("*") or
               (kind == "i32" and name.startswith("stride"))]
    attrs = {(i,): [["tt.divisibility", 16]] for i in aligned}
    src = GluonASTSource(kernel_fn, signature=signature, constexprs=constexprs, attrs=attrs)
    kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps})
    ptx = kernel.asm["ptx"]
    shape = f"token_heads={ns.token_heads}" if ns.token_heads else f"heads={ns.heads}"
    print(f"{ns.tile} block_n={ns.block_n} {shape} kv_int64={ns.kv_int64}: {resource_usage(kernel.asm['cubin'])}, "
          f"shared {kernel.metadata.shared} B, "
          f"wgmma {len(re.findall(r'wgmma.mma_async', ptx))}, cp.async {len(re.findall(r'cp.async.cg|cp.async.ca', ptx))}, "
          f"setmaxnreg {re.findall(r'setmaxnreg[^;]*', ptx)}")
    if ns.ptx:
        pathlib.Path(ns.ptx).write_text(ptx)
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
