"""The per-token FP8 kernel part was removed after GPU run 38 measured it 4.3-5.6x slower; the .txt keeps its output.

Compile the FP8 pool's one-launch dequantiser (glmcheck.kernels.fp8_dequant) for sm_90 without a GPU (triton 3.9
here; no torch needed) and print its registers, spills, shared memory and instruction mix. Usage: python
docs/evidence/cpu-runs/2026-12-04-fp8-kernel-ptx.py (output in the .txt beside it, whose per-token lines came from
the removed part: glmcheck.kernels.per_token_fp8 beside the bf16 per-token kernel at 16 and 64 query rows): the PTX
the dequantiser's bit-exactness rests on (mul.f32 without .ftz, the hardware e4m3 and bf16 conversions)."""
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
