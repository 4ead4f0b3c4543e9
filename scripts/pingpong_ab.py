"""GPU A/B of whole Gluon tile kernel files: the committed tile against edited copies of it.

Usage (H200): PYTHONPATH=. python3 scripts/pingpong_ab.py --variant NAME=PATH [--variant ...]
    [--tile pingpong|split] [--seq-len 8192 2048] [--heads 64 8] [--rounds 3]
Each PATH is a copy of glmcheck/kernels/union_pingpong.py (--tile split: union_ws.py, at the union
groups that tile runs, e.g. --heads 16 32) with one change (kept out of git while it
is measured; its diff goes to the GPU run's log). At each point every kernel, the committed one
("default") first, passes pingpong_probe.py's gates (fp32 reference, the split tile, cut lengths,
empty groups exactly zero) on poisoned outputs; those that pass are then timed alternately,
ROUNDS rounds in one process, and the medians and each one's speed-up over the default printed.
Used where a change is too wide for a WsConfig knob (a gather layout, a fill order): GPU run 18's
call 7 did the same with a one-off script.
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import statistics
import sys
import types

import torch
from pingpong_probe import (  # scripts/ is on sys.path
    PINGPONG,
    check_pingpong,
    probe_sets,
    run_points,
)

import glmcheck.kernels.union_pingpong as committed_pingpong
import glmcheck.kernels.union_ws as committed_split
from glmcheck.bench import time_ms
from glmcheck.kernels.union_ws_launch import WsConfig, launch_union_attention_ws

DEFAULT_NAME = "default"
# --tile: (the committed module the launcher imports the kernel from, the kernel's name, the config
# that runs it)
TILES = {"pingpong": (committed_pingpong, "sparse_mla_union_pingpong_kernel", PINGPONG),
         "split": (committed_split, "sparse_mla_union_ws_kernel", WsConfig(tile="split"))}


def parse_kernel_variant(text: str) -> tuple[str, pathlib.Path]:
    """"NAME=PATH" -> (NAME, PATH) of an existing .py file; ArgumentTypeError naming what is wrong."""
    name, sep, path = text.partition("=")
    if not sep or not name.isidentifier() or name == DEFAULT_NAME:
        raise argparse.ArgumentTypeError(f"--variant takes NAME=PATH with NAME an identifier other than "
                                         f"{DEFAULT_NAME!r}, got {text!r}")
    file = pathlib.Path(path)
    if file.suffix != ".py" or not file.is_file():
        raise argparse.ArgumentTypeError(f"--variant {name}: PATH must be an existing .py file, got {path!r}")
    return name, file


def load_kernel_file(name: str, file: pathlib.Path) -> types.ModuleType:
    """A kernel file as module glmcheck.kernels._ab_<name> (its own Gluon JIT functions)."""
    qualified = f"glmcheck.kernels._ab_{name}"
    spec = importlib.util.spec_from_file_location(qualified, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[qualified] = module
    spec.loader.exec_module(module)
    return module


def use_kernel(tile: str, kernel) -> None:
    """Make the launcher run `kernel` for `tile` (it imports the kernel from the committed module
    at each call)."""
    module, kernel_name, _ = TILES[tile]
    setattr(module, kernel_name, kernel)


def ab_point(seq_len: int, heads: int, tile: str, kernels: dict, rounds: int) -> bool:
    """Gate every kernel at one point, time the passing ones alternately; False when a gate fails.
    The gates' split-tile output comes from the committed split tile."""
    config = TILES[tile][2]
    use_kernel(tile, kernels[DEFAULT_NAME])
    point = probe_sets(seq_len, heads)
    if point is None:
        return False
    outs = {}
    for name, kernel in kernels.items():
        use_kernel(tile, kernel)
        print(f"[{name}]", end=" ", flush=True)
        outs[name] = check_pingpong(point, config)
    timed = [name for name, out in outs.items() if out is not None]
    times: dict[str, list[float]] = {name: [] for name in timed}
    for _ in range(rounds):
        for name in timed:
            use_kernel(tile, kernels[name])
            times[name].append(time_ms(lambda o=outs[name]: launch_union_attention_ws(
                point.args, point.sets, o, point.scale, point.kv_int64, config)))
    use_kernel(tile, kernels[DEFAULT_NAME])
    medians = {name: statistics.median(t) for name, t in times.items()}
    base = medians.get(DEFAULT_NAME)
    for name in timed:
        ratio = f", {base / medians[name]:.3f}x {DEFAULT_NAME}" if base else ""
        rounds_text = ", ".join(f"{t:.3f}" for t in times[name])
        print(f"{point.label} {name}: median {medians[name]:.3f} ms ({rounds_text}){ratio}", flush=True)
    return len(timed) == len(kernels)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--variant", action="append", required=True, type=parse_kernel_variant,
                        help="NAME=PATH of an edited copy of the tile's kernel file (repeatable)")
    parser.add_argument("--tile", choices=sorted(TILES), default="pingpong",
                        help="which committed kernel the variants replace: union_pingpong.py or union_ws.py")
    parser.add_argument("--seq-len", type=int, nargs="+", default=[8192, 2048])
    parser.add_argument("--heads", type=int, nargs="+", default=[64, 8])
    parser.add_argument("--rounds", type=int, default=3)
    ns = parser.parse_args()
    if ns.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {ns.rounds}")
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU (sm_90) with triton 3.6's Gluon")
    module, kernel_name, _ = TILES[ns.tile]
    kernels = {DEFAULT_NAME: getattr(module, kernel_name)}
    for name, file in ns.variant:
        if name in kernels:
            parser.error(f"--variant {name} given twice")
        kernels[name] = getattr(load_kernel_file(name, file), kernel_name)
    return run_points(ns.seq_len, ns.heads,
                      lambda seq_len, heads: ab_point(seq_len, heads, ns.tile, kernels, ns.rounds))


if __name__ == "__main__":
    raise SystemExit(main())
