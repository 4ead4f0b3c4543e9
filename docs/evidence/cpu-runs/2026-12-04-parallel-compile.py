"""Does Triton's compile run in parallel threads? Six variants of the marks build (G 2/4/8 x two block sizes)
compiled for sm_90 (triton 3.6, no GPU), one after the other and in a pool of W threads, each from an empty cache.

    TRITON_CACHE_DIR=$(mktemp -d) python docs/evidence/cpu-runs/2026-12-04-parallel-compile.py      # serial
    TRITON_CACHE_DIR=$(mktemp -d) W=2 python docs/evidence/cpu-runs/2026-12-04-parallel-compile.py  # 2 threads
"""
import importlib
import os
import pathlib
import sys
import time
import types
from concurrent.futures import ThreadPoolExecutor

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

PKG = pathlib.Path(__file__).resolve().parents[3] / "glmcheck"
for name, path in (("glmcheck", PKG), ("glmcheck.kernels", PKG / "kernels")):
    stub = types.ModuleType(name)
    stub.__path__ = [str(path)]
    sys.modules[name] = stub
fn = importlib.import_module("glmcheck.kernels.union_marks").union_marks_kernel
names = list(fn.arg_names)
INTS = ["num_groups", "num_kv_rows", "topk", "width", "stride_it", "stride_is", "stride_mp", "stride_rg", "stride_bg"]


def source(G: int, block: int) -> ASTSource:
    sig = {"idx_ptr": "*i32", "length_ptr": "*i32", "marks_ptr": "*u8", "rows_ptr": "*i32", "bits_ptr": "*u8",
           "len_ptr": "*i32", **{n: "i32" for n in INTS}}
    const = {"G": G, "G_POW2": triton.next_power_of_2(G), "HAS_LENGTH": True, "BLOCK": block}
    sig.update({n: "constexpr" for n in const})
    return ASTSource(fn, sig, {(names.index(k),): v for k, v in const.items()}, {})


def compile_one(job: tuple[int, int]):
    return triton.compile(source(*job), target=GPUTarget("cuda", 90, 32), options={"num_warps": 8})


jobs = [(g, b) for g in (2, 4, 8) for b in (256, 512)]
workers = int(os.environ.get("W", "0"))
start = time.time()
if workers:
    list(ThreadPoolExecutor(workers).map(compile_one, jobs))
else:
    [compile_one(j) for j in jobs]
print(f"{len(jobs)} variants, {'%d threads' % workers if workers else 'serial'}: {time.time() - start:.2f} s")
