"""Compile the per-token kernel for sm_90a without a GPU and print its resources.

Usage (any machine with triton 3.6; no GPU or torch needed):
    python scripts/token_compile.py [--block-n 64] [--warps 4] [--stages 3] [--heads 8]
Compiles the H200 table tile twice, with the loop bound read from topk_length (HAS_LENGTH) and
found by the kernel from the index row, and prints registers, spills, shared memory and the
PTX size of each, so a change to the kernel's prologue can be checked for cost in its main loop.
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import sys
import types

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

KERNELS = pathlib.Path(__file__).resolve().parents[1] / "glmcheck" / "kernels"
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from ws_compile import resource_usage


def load(name: str):
    """glmcheck/kernels/<name>.py alone, under its package name (the package needs torch)."""
    for package in ("glmcheck", "glmcheck.kernels"):
        sys.modules.setdefault(package, types.ModuleType(package))
    spec = importlib.util.spec_from_file_location(f"glmcheck.kernels.{name}", KERNELS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--block-n", type=int, default=64)
    parser.add_argument("--warps", type=int, default=4)
    parser.add_argument("--stages", type=int, default=3)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--longest-first", action="store_true")
    ns = parser.parse_args()
    load("device_helpers")
    kernel = load("per_token").sparse_mla_token_kernel
    names = kernel.arg_names
    signature = {name: "i32" for name in names}
    signature.update({"q_ptr": "*bf16", "kv_ptr": "*bf16", "idx_ptr": "*i32", "len_ptr": "*i32",
                      "out_ptr": "*bf16", "qk_scale_log2": "fp32"})
    constexprs = {"stride_qd": 1, "stride_kvd": 1, "stride_ik": 1, "stride_od": 1, "D_V": 512, "D_TAIL": 64,
                  "TAIL_PAD": 64, "BLOCK_H": max(16, ns.heads), "BLOCK_N": ns.block_n, "KV_INT64": False,
                  "UPCAST": False, "END_BLOCK": 1024,
                  "LONGEST_FIRST": ns.longest_first}
    for has_length in (True, False):
        constexprs["HAS_LENGTH"] = has_length
        for name in constexprs:
            signature[name] = "constexpr"
        aligned = [i for i, name in enumerate(names) if signature[name].startswith("*") or
                   (signature[name] == "i32" and name.startswith("stride"))]
        attrs = {(i,): [["tt.divisibility", 16]] for i in aligned}
        src = ASTSource(kernel, signature=signature, constexprs=dict(constexprs), attrs=attrs)
        compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                                  options={"num_warps": ns.warps, "num_stages": ns.stages})
        print(f"HAS_LENGTH={has_length} tile {ns.block_n}/{ns.warps}/{ns.stages}: "
              f"{resource_usage(compiled.asm['cubin'])}, shared {compiled.metadata.shared} B, "
              f"PTX {len(compiled.asm['ptx'].splitlines())} lines", flush=True)


if __name__ == "__main__":
    main()
