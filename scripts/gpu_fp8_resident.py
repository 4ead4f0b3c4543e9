"""FP8 weights resident on the GPU (issue 69, item 5), the steps `scripts/gpu_fp8_resident.sh` runs in Python:

- `paired`: the just-in-time dequantisation's bits and cost. First, dequantisation on CUDA against the CPU's, bit for
  bit (random codes, regular and cut-inside-a-block scale maps). Then rank 0 of glm-5.2 at TP 8, `--layers` deep,
  with its dummy weights quantised and resident, beside its bf16 twin (the same values dequantised once:
  `fp8_resident.to_bf16`): last-position logits bit for bit equal under triton_sparse_mla, then `--rounds` paired
  rounds (the order alternating) of one forward each at each length, and the dequantisation alone (every resident
  tensor once, what a forward adds). Prints a table; writes OUT/paired.json.
- `refgpu`: layer0 and firsttoken on ref-gpu-fp8 with --weights fp8 and with --weights bf16 (records under OUT);
  their rows (and firsttoken's per-backend rows) must be equal. Prints one line per check; writes OUT/refgpu.json.

    python3 scripts/gpu_fp8_resident.py paired OUT [--layers 16] [--tokens 4096,8192] [--rounds 8]
    python3 scripts/gpu_fp8_resident.py refgpu OUT [--tokens 4096 (layer0's length)] [--limit N (firsttoken's prompts)]
(A smoke test on the CPU: TRITON_INTERPRET=1 python scripts/gpu_fp8_resident.py paired OUT --model tiny --tp 2
--layers 3 --tokens 32 --rounds 2 --device cpu.)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from glmcheck.checks.runner import SwapOptions, forward_under
from glmcheck.model import make_config
from glmcheck.model.fp8_build import build_resident, dummy_sources
from glmcheck.model.fp8_codes import BlockFP8
from glmcheck.model.fp8_resident import held_bytes, resident_tensors, to_bf16


def dequant_bits(device: torch.device) -> str:
    """`device`'s dequantisation against the CPU's for random codes, whole and cut inside a block: 'equal' or why
    not."""
    generator = torch.Generator().manual_seed(0)
    for shape, cut in (((640, 896), ("rows", 1, 3)), ((4, 2 * 96, 384), ("gate_up", 1, 2)), ((576, 6144), None)):
        values = torch.randn(shape, generator=generator) * torch.logspace(-4, 2, shape[-1])
        halves = values.chunk(2, dim=-2) if cut and cut[0] == "gate_up" else [values]
        weight = BlockFP8.cat_rows([BlockFP8.quantize(h.to(torch.bfloat16)) for h in halves])
        weight = weight.cut(*cut).compact() if cut else weight
        on_gpu = BlockFP8(weight.codes.to(device), weight.scale.to(device), weight.rows, weight.cols, weight.block)
        if not torch.equal(on_gpu.dequantize().cpu().view(torch.int16), weight.dequantize().view(torch.int16)):
            return f"DIFFER at {shape} cut {cut}"
    return "equal"


def shard(model: str, layers: int, tp: int, device: torch.device):
    config = make_config(model, layers=layers)
    fp8, dense = dummy_sources(config, rank=0, world=tp, device=device, seed=0, init="sharp")
    return build_resident(config, rank=0, world=tp, device=device, fp8=fp8, dense=dense)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_forward(model, ids) -> tuple[float, torch.Tensor]:
    sync(ids.device)
    start = time.perf_counter()
    run = forward_under(model, ids, "triton_sparse_mla", SwapOptions(tp=1))
    sync(ids.device)
    return time.perf_counter() - start, run.captured.logits


def dequant_alone(model) -> float:
    """Seconds to dequantise every resident tensor of `model` once (each freed before the next)."""
    steps = resident_tensors(model)
    device = next(model.parameters()).device
    sync(device)
    start = time.perf_counter()
    for name, step in steps.items():
        owner, _, leaf = name.rpartition(".")
        step(model.get_submodule(owner).parametrizations[leaf].original)
    sync(device)
    return time.perf_counter() - start


def interval(diffs: list[float]) -> tuple[float, float, float]:
    """(mean, low, high): a 95 % t-interval of the mean paired difference."""
    from scipy import stats

    mean = statistics.fmean(diffs)
    half = stats.t.ppf(0.975, len(diffs) - 1) * statistics.stdev(diffs) / len(diffs) ** 0.5
    return mean, mean - half, mean + half


def paired(out: Path, model: str, layers: int, tp: int, lengths: list[int], rounds: int, device: torch.device) -> None:
    result = {"dequant_bits_vs_cpu": dequant_bits(device)}
    print(f"dequantisation on {device} against the CPU: {result['dequant_bits_vs_cpu']}")
    started = time.perf_counter()
    resident = shard(model, layers, tp, device)
    sync(device)
    result["build_seconds"] = time.perf_counter() - started
    twin = to_bf16(shard(model, layers, tp, device))
    result["held"] = {"resident": held_bytes(resident), "bf16": held_bytes(twin)}
    result["dequant_alone_s"] = statistics.median(dequant_alone(resident) for _ in range(3))
    with torch.inference_mode():
        result["lengths"] = {}
        for length in lengths:
            vocab = resident.config.vocab_size
            ids = torch.randint(3, vocab, (1, length), generator=torch.Generator().manual_seed(length)).to(device)
            _, a = timed_forward(resident, ids)  # warm-up (Triton compiles), and the bits
            _, b = timed_forward(twin, ids)
            times = {"resident": [], "bf16": []}
            for r in range(rounds):
                for name in (("resident", "bf16") if r % 2 == 0 else ("bf16", "resident")):
                    times[name].append(timed_forward(resident if name == "resident" else twin, ids)[0])
            diffs = [x - y for x, y in zip(times["resident"], times["bf16"])]
            mean, low, high = interval(diffs)
            result["lengths"][length] = {"logits_equal": bool(torch.equal(a, b)), "times": times,
                                         "diff_mean": mean, "diff_low": low, "diff_high": high}
    (out / "paired.json").write_text(json.dumps(result, indent=1))
    gib = 2**30
    print(f"{model} {layers} layers, rank 0 of TP {tp} (dummy weights): built resident in "
          f"{result['build_seconds']:.1f} s; held {result['held']['resident']['total'] / gib:.2f} GiB resident vs "
          f"{result['held']['bf16']['total'] / gib:.2f} GiB bf16; dequantising every resident tensor once: "
          f"{result['dequant_alone_s'] * 1e3:.1f} ms")
    print("| tokens | logits resident = bf16 | resident s (median) | bf16 s (median) "
          "| resident - bf16, mean [95 % CI] |")
    print("|---|---|---|---|---|")
    for length, row in result["lengths"].items():
        medians = {name: statistics.median(row["times"][name]) for name in ("resident", "bf16")}
        print(f"| {length} | {'yes' if row['logits_equal'] else 'NO'} | {medians['resident']:.3f}"
              f" | {medians['bf16']:.3f} | {row['diff_mean'] * 1e3:+.1f} ms "
              f"[{row['diff_low'] * 1e3:+.1f}, {row['diff_high'] * 1e3:+.1f}] |")


def refgpu(out: Path, tokens: int, limit: int | None) -> None:
    from glmcheck import evaluate

    result = {}
    for check in ("layer0", "firsttoken"):
        reports = {}
        for weights in ("fp8", "bf16"):
            options = evaluate.CheckOptions(model="ref-gpu-fp8", weights=weights, baseline="none", quiet=True,
                                            backends=["triton_sparse_mla", "triton_sparse_mla:union4"])
            started = time.perf_counter()
            report = (evaluate.layer0(options, tokens=tokens) if check == "layer0"
                      else evaluate.firsttoken(options, limit=limit))
            report.write(out / f"rec-refgpu-{check}-{weights}")
            reports[weights] = (report, time.perf_counter() - started)
        (fp8, fp8_s), (bf16, bf16_s) = reports["fp8"], reports["bf16"]
        same_rows = json.dumps(fp8.rows, sort_keys=True) == json.dumps(bf16.rows, sort_keys=True)
        same_extra = json.dumps(fp8.extra, sort_keys=True) == json.dumps(bf16.extra, sort_keys=True)
        result[check] = {"rows_equal": same_rows, "extra_equal": same_extra, "verdicts": [fp8.verdict, bf16.verdict],
                         "weights": [fp8.model["weights"], bf16.model["weights"]], "seconds": [fp8_s, bf16_s]}
        print(f"ref-gpu-fp8 {check}: rows {'equal' if same_rows else 'DIFFER'}, per-backend rows "
              f"{'equal' if same_extra else 'DIFFER'}; verdicts fp8 {fp8.verdict} / bf16 {bf16.verdict}; "
              f"{fp8_s:.1f} s / {bf16_s:.1f} s")
    (out / "refgpu.json").write_text(json.dumps(result, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["paired", "refgpu"])
    parser.add_argument("out")
    parser.add_argument("--model", default="glm-5.2")
    parser.add_argument("--tp", type=int, default=8)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--tokens", default="4096,8192")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--limit", type=int, default=None, help="refgpu: firsttoken's first N prompts (default all)")
    ns = parser.parse_args()
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    if ns.step == "paired":
        paired(out, ns.model, ns.layers, ns.tp, [int(t) for t in ns.tokens.split(",")], ns.rounds,
               torch.device(ns.device))
    else:
        refgpu(out, int(ns.tokens.split(",")[0]), ns.limit)


if __name__ == "__main__":
    main()
