"""Compile union_marks_kernel for sm_90 (triton 3.6; no GPU or torch needed) under several integer specialisations
and print each PTX's global load/store mix: every int divisible by 16 (top-k 2048, the bench's and models' case),
none specialised, and only some. Usage: python docs/evidence/cpu-runs/2026-12-04-marks-ptx.py G (2, 4 or 8).
The result is in the .txt beside it: topk, the index stride, num_kv_rows and the marks pitch decide the code (16-byte
index loads); the group count, the rows' capacity and pitches change no instruction (identical PTX)."""
import importlib, pathlib, re, sys, types
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

PKG = pathlib.Path(__file__).resolve().parents[3] / "glmcheck"
for name, path in (("glmcheck", PKG), ("glmcheck.kernels", PKG / "kernels")):
    m = types.ModuleType(name); m.__path__ = [str(path)]; sys.modules[name] = m
mod = importlib.import_module("glmcheck.kernels.union_marks")
fn = mod.union_marks_kernel
names = list(fn.arg_names)
sig = {"idx_ptr": "*i32", "length_ptr": "*i32", "marks_ptr": "*u8", "rows_ptr": "*i32", "bits_ptr": "*u8",
       "len_ptr": "*i32"}
ints = ["num_groups", "num_kv_rows", "topk", "width", "stride_it", "stride_is", "stride_mp", "stride_rg", "stride_bg"]
G = int(sys.argv[1]) if len(sys.argv) > 1 else 8
for n in ints:
    sig[n] = "i32"
const = {"G": G, "G_POW2": triton.next_power_of_2(G), "HAS_LENGTH": True, "BLOCK": 1024}
for n in const:
    sig[n] = "constexpr"
ptrs = [names.index(n) for n in ("idx_ptr", "length_ptr", "marks_ptr", "rows_ptr", "bits_ptr", "len_ptr")]

def compile_with(div16: list[str], one: list[str]):
    attrs = {(i,): [["tt.divisibility", 16]] for i in ptrs}
    for n in div16:
        attrs[(names.index(n),)] = [["tt.divisibility", 16]]
    constexprs = {(names.index(k),): v for k, v in const.items()}
    for n in one:  # ==1 specialisation turns the int into a constant
        constexprs[(names.index(n),)] = 1
        sig[n] = "constexpr"
    src = ASTSource(fn, dict(sig), constexprs, attrs)
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 8})
    for n in one:
        sig[n] = "i32"
    return k.asm["ptx"]

def mix(ptx: str) -> dict:
    out = {}
    for m in re.finditer(r"\b(ld|st)\.global(\.[a-z0-9]+)*", ptx):
        key = m.group(0)
        out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items()))

spec = compile_with(["num_groups", "num_kv_rows", "topk", "width", "stride_it", "stride_mp", "stride_rg", "stride_bg"],
                    ["stride_is"])
plain_strided = compile_with(["stride_mp"], ["stride_is"])
print("G", G)
print("specialised (top-k 2048: all divisible by 16, slot stride 1):", mix(spec))
print("sizes not specialised (marks pitch 16-aligned, slot stride 1):", mix(plain_strided))
print("PTX equal:", spec == plain_strided, len(spec), len(plain_strided))
keep = compile_with(["topk", "stride_it", "stride_mp"], ["stride_is"])
print("only topk / stride_it / pitch specialised:", mix(keep), "PTX equal to fully specialised:", keep == spec)
keep2 = compile_with(["topk", "stride_it", "stride_mp", "num_kv_rows"], ["stride_is"])
print("+ num_kv_rows:", mix(keep2), keep2 == spec)
