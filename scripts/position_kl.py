"""Per-position KL(reference || row) of every row of the all-position logits check, over seeds: the data the gate of
`glmcheck.checks.position_gate` is designed and measured on (docs/reliability.md, "All-position logits").

    python scripts/position_kl.py OUT.pt [--model ref-cpu] [--tokens 256] [--seeds 20] [--band 8] [--device cpu]
        [--compact] [--faults all|none|NAME,...] [--late-start P] [--extra flashmla_sparse,...]

For each seed (a window of the trained model's held-out text at a seeded offset), one forward per row with every
position's logits kept: the exact reference twice, band:0..band:N-1, the kernel under test (per-token and each legal
union), the planted faults of `glmcheck.selftest.faults` (the structural ones and the late one included). Saves
{seed: {row: kl [T]}} with same_top and dlogprob beside it (computed in fp64, stored as fp32: the device returns
16 MiB a file). --compact keeps kl and same_top only (what `scripts/position_gate_rates.py` needs): about 5 bytes a
position a row, so two seeds at 32768 tokens fit one file the device returns.
"""

from __future__ import annotations

import argparse
import os
import time

import torch

import glmcheck.kernels  # noqa: F401  (the interpreter on a machine without CUDA)
from glmcheck.backends.registry import backend_names, register_backend
from glmcheck.checks.positions import position_statistics
from glmcheck.checks.runner import SwapOptions, forward_under
from glmcheck.data.heldout import heldout_stream, natural_prompt
from glmcheck.data.model_tokenizer import model_tokenizer
from glmcheck.kernels.union import legal_groups
from glmcheck.model.load import ModelSpec, load_model
from glmcheck.selftest.faults import FAULTS, STRUCTURAL_FAULTS, late_fault


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--model", default="ref-cpu")
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--band", type=int, default=8)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--compact", action="store_true", help="keep kl and same_top only (no dlogprob)")
    parser.add_argument("--faults", default="all",
                        help="all, none, or fault names (fault:...; `late`), comma-separated")
    parser.add_argument("--late-start", type=int, default=None,
                        help="the late fault's first position (3/4 of --tokens)")
    parser.add_argument("--extra", default="", help="more legitimate rows (backend names), comma-separated")
    args = parser.parse_args()
    device = torch.device(args.device)
    late_name, late_fn, late_text = late_fault(args.tokens, args.late_start)
    faults = {**FAULTS, **STRUCTURAL_FAULTS, late_name: (late_fn, late_text)}
    if args.faults != "all":
        wanted = {late_name if n == "late" else n for n in args.faults.split(",") if n and n != "none"}
        unknown = wanted - set(faults)
        if unknown:
            parser.error(f"--faults: unknown {sorted(unknown)}; expected names among {sorted(faults)} or `late`")
        faults = {n: f for n, f in faults.items() if n in wanted}
    known = set(backend_names())
    for name, (fn, text) in faults.items():
        if name not in known:
            register_backend(name, fn, text, source="scripts/position_kl.py")
    spec = ModelSpec(preset=args.model)
    model = load_model(spec, device)
    tokenizer = model_tokenizer(spec, model.config.vocab_size)
    stream = heldout_stream(tokenizer)
    heads = model.config.num_attention_heads
    rows = (["reference"] + [f"band:{k}" for k in range(args.band)] + ["triton_sparse_mla"]
            + [f"triton_sparse_mla:union{g}" for g in legal_groups(heads)]
            + [n for n in args.extra.split(",") if n] + list(faults))
    result = {"model": args.model, "tokens": args.tokens, "band": args.band, "late": late_name, "seeds": {}}
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        started = time.time()
        prompt = natural_prompt(tokenizer, args.tokens, seed, device, stream=stream)
        options = SwapOptions()
        ref = forward_under(model, prompt, "reference", options, last_logits=args.tokens).captured.logits[0]
        seed_rows = {}
        for name in rows:
            logits = forward_under(model, prompt, name, options, last_logits=args.tokens).captured.logits[0]
            stats = position_statistics(logits, ref)
            seed_rows[name] = {"kl": stats.distance.float(), "same_top": stats.same_top}
            if not args.compact:
                seed_rows[name]["dlogprob"] = stats.dlogprob.float()
        result["seeds"][seed] = seed_rows
        torch.save(result, args.out + ".part")  # whole or not at all: a run cut short keeps its finished seeds
        os.replace(args.out + ".part", args.out)
        means = {n: float(v["kl"].mean()) for n, v in seed_rows.items()}
        band = " ".join(f"{means['band:' + str(k)]:.2e}" for k in range(min(4, args.band)))
        print(f"seed {seed}: {time.time() - started:.1f} s; mean KL band {band} "
              f"triton {means['triton_sparse_mla']:.2e}", flush=True)


if __name__ == "__main__":
    main()
