"""Compile the FP8 pool's kernels for sm_90 without a GPU (triton 3.9 here; no torch needed) and print each one's
registers, spills, shared memory and instruction mix: the one-launch dequantiser (glmcheck.kernels.fp8_dequant) and
the per-token kernel over the pool (glmcheck.kernels.per_token_fp8) beside the bf16 per-token kernel at the same
tiles (16 and 64 query rows). Usage: python docs/evidence/cpu-runs/2026-12-04-fp8-kernel-ptx.py (output in the .txt
beside it): the tile of prefill_fp8.GPU_TILE, and the PTX the dequantiser's bit-exactness rests on (mul.f32 without
.ftz, the hardware e4m3 and bf16 conversions)."""
import collections, importlib, pathlib, re, subprocess, sys, tempfile, types
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

PKG = pathlib.Path(__file__).resolve().parents[3] / "glmcheck"
for name, path in (("glmcheck", PKG), ("glmcheck.kernels", PKG / "kernels"), ("glmcheck.process", PKG / "process")):
    m = types.ModuleType(name); m.__path__ = [str(path)]; sys.modules[name] = m
CUOBJDUMP = pathlib.Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"


def usage(cubin: bytes) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as handle:
        handle.write(cubin); handle.flush()
        text = subprocess.run([str(CUOBJDUMP), "-res-usage", handle.name], capture_output=True, text=True).stdout
    found = re.search(r"REG:(\d+) STACK:(\d+) SHARED:\d+ LOCAL:(\d+)", text)
    return f"{found.group(1)} registers, stack {found.group(2)} B, local {found.group(3)} B"


def build(kernel, kinds, constexprs, warps, stages, label, mix=False):
    signature = {n: kinds.get(n, "constexpr") for n in kernel.arg_names}
    aligned = [i for i, (n, k) in enumerate(signature.items()) if k.startswith("*") or (k == "i32" and n.startswith("stride"))]
    attrs = {(i,): [["tt.divisibility", 16]] for i in aligned}  # as the JIT infers at a real launch
    compiled = triton.compile(ASTSource(kernel, signature=signature, constexprs=constexprs, attrs=attrs),
                              target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})
    ptx = compiled.asm["ptx"]
    mma = f"wgmma {ptx.count('wgmma.mma_async')}, mma.sync {ptx.count('mma.sync')}"
    print(f"{label}: {usage(compiled.asm['cubin'])}, shared {compiled.metadata.shared} B, {mma}")
    if mix:
        ops = collections.Counter(re.findall(r"\b(?:cvt|mul|fma)[\w.]*", ptx))
        print("  float ops:", ", ".join(f"{op} {n}" for op, n in sorted(ops.items()) if "f" in op.split(".", 1)[-1]))


dequant = importlib.import_module("glmcheck.kernels.fp8_dequant")
kinds = {"pool_ptr": "*u8", "out_ptr": "*i16", "num_rows": "i32", "stride_pp": "i32", "stride_ps": "i32",
         "stride_or": "i32"}
base = {"stride_pb": 1, "stride_oc": 1, "PAGE_ROWS": 64, "LATENT": 512, "TILES": 4, "D_ROPE": 64, "ROPE_PAD": 64,
        "BLOCK_R": 32, "TILE_COLS": 128, "ROW_INT64": False, "NATIVE_ROUND": True, "NAN_BITS": 0}
for native in (True, False):
    build(dequant.dequantize_pool_kernel, kinds, base | {"NATIVE_DECODE": native}, 4, 3,
          f"dequantiser, {'hardware' if native else 'integer'} e4m3 decode", mix=True)

fp8 = importlib.import_module("glmcheck.kernels.per_token_fp8").sparse_mla_fp8_token_kernel
bf16 = importlib.import_module("glmcheck.kernels.per_token").sparse_mla_token_kernel
shared = {"q_ptr": "*bf16", "idx_ptr": "*i32", "len_ptr": "*i32", "out_ptr": "*bf16", "num_kv_rows": "i32",
          "num_heads": "i32", "topk": "i32", "stride_qt": "i32", "stride_qh": "i32", "stride_it": "i32",
          "stride_ot": "i32", "stride_oh": "i32", "qk_scale_log2": "fp32"}
for rows, block_n, warps, stages in ((16, 64, 4, 3), (16, 64, 8, 2), (16, 32, 8, 2), (64, 64, 8, 2)):
    common = {"stride_qd": 1, "stride_ik": 1, "stride_od": 1, "D_V": 512, "D_TAIL": 64, "TAIL_PAD": 64,
              "BLOCK_H": rows, "BLOCK_N": block_n, "UPCAST": False, "HAS_LENGTH": True, "FIND_BOUND": rows <= 16,
              "END_BLOCK": 1024}
    tile = f"{rows} query rows, tile ({block_n} rows, {warps} warps, {stages} stages)"
    build(fp8, shared | {"pool_ptr": "*u8", "stride_pp": "i32", "stride_ps": "i32"},
          common | {"stride_pb": 1, "PAGE_ROWS": 64, "TILE_W": 128, "ROW_INT64": False, "NATIVE_DECODE": True},
          warps, stages, f"FP8 per-token, {tile}")
    build(bf16, shared | {"kv_ptr": "*bf16", "stride_kvs": "i32"}, common | {"stride_kvd": 1, "KV_INT64": False},
          warps, stages, f"bf16 per-token, {tile}")
