"""Where one model forward's time goes, per backend: a torch.profiler table of one warm forward under each row.

    python3 docs/evidence/gpu-runs/2026-12-04-run40/gpu_profile_forward.py --model ref-gpu --tokens 32768 --backends band:0,triton_sparse_mla

Each backend runs one untimed forward first (its Triton kernels compile and its plans warm up), then one forward
timed with `torch.cuda.synchronize` (wall seconds) and one under `torch.profiler` (device kernels and host
operators, the top `--top` by self time). Logits are kept at every position (`last_logits` = tokens), as the sweep
keeps them. Evidence for docs/performance.md ("Time to verdict"), not a check: nothing is compared.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

from glmcheck.checks.runner import forward_under
from glmcheck.data.model_prompts import model_prompt
from glmcheck.evaluate.options import CheckOptions
from glmcheck.evaluate.setup import Setup
from glmcheck.model.load import load_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="ref-gpu")
    parser.add_argument("--tokens", type=int, default=32768)
    parser.add_argument("--backends", default="band:0,triton_sparse_mla")
    parser.add_argument("--kept", type=int, default=None, help="logits kept (default: every position)")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    setup = Setup(CheckOptions(model=args.model, quiet=True), one_prompt=True, tokens=args.tokens)
    model = load_model(setup.spec, setup.device)
    prompt = model_prompt(setup.spec, model.config.vocab_size, args.tokens, 0, setup.device)
    kept = args.kept or args.tokens
    cuda = setup.device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    for name in args.backends.split(","):
        forward_under(model, prompt, name, setup.options, last_logits=kept)
        sync()
        start = time.perf_counter()
        forward_under(model, prompt, name, setup.options, last_logits=kept)
        sync()
        print(f"=== {name}: one warm forward over {args.tokens} tokens, {time.perf_counter() - start:.3f} s wall")
        with profile(activities=activities) as prof:
            forward_under(model, prompt, name, setup.options, last_logits=kept)
            sync()
        events = prof.key_averages()
        print(events.table(sort_by="self_cuda_time_total" if cuda else "self_cpu_time_total", row_limit=args.top, max_name_column_width=60))
        print(events.table(sort_by="self_cpu_time_total", row_limit=args.top, max_name_column_width=60))


if __name__ == "__main__":
    main()
