"""Is the union path at small shapes bound by host-side launch overhead? (GPU)

Usage (H200): PYTHONPATH=. python3 scripts/launch_overhead_probe.py [--points 1x2048:8:8,1x8192:8:8]
Per point (batch x seq_len : heads : G) it times the whole union path (build + attention) as the
bench does (eager, do_bench median) and the same work replayed from a CUDA graph (no Python, no
launch overhead), after checking that both write the same output. Eager well above graph means
the GPU waits for the host.
"""

from __future__ import annotations

import argparse
import sys

import torch

from glmcheck.bench import D_V, BenchPoint, capture_graph, make_inputs, time_ms
from glmcheck.inputs import poisoned_out
from glmcheck.kernels import prefill
from glmcheck.kernels.validate import PrefillArgs


def union_work(args: PrefillArgs, group: int, out: torch.Tensor) -> None:
    """Exactly what sparse_mla_prefill(..., union=G) runs after its checks (build, attention, tail)."""
    prefill._run_union(args, group, out, False, None)


def probe(label: str, heads: int, group: int) -> None:
    batch, seq_len = (int(v) for v in label.split("x"))
    x = make_inputs(BenchPoint(batch, seq_len, heads), seed=3)
    args = PrefillArgs(x.q, x.kv, x.indices, None, x.sm_scale, D_V)
    eager_out = poisoned_out(x.q.shape[0], heads, D_V, "cuda")
    union_work(args, group, eager_out)
    eager = time_ms(lambda: union_work(args, group, eager_out))
    graph_out = poisoned_out(x.q.shape[0], heads, D_V, "cuda")

    def run_into_graph_out() -> torch.Tensor:
        union_work(args, group, graph_out)
        return graph_out

    replay_fn, _ = capture_graph(run_into_graph_out)
    replay_fn()
    torch.cuda.synchronize()
    same = torch.equal(graph_out, eager_out)
    replay = time_ms(replay_fn)
    print(f"{label} H={heads} G={group}: eager {eager:.3f} ms, graph replay {replay:.3f} ms "
          f"(eager/graph {eager / replay:.2f}); outputs equal: {same}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--points", default="1x2048:8:8,1x2048:8:4,1x2048:8:2,1x4096:8:8,1x8192:8:8")
    ns = parser.parse_args()
    for item in ns.points.split(","):
        label, heads, group = item.split(":")
        probe(label, int(heads), int(group))
    return 0


if __name__ == "__main__":
    sys.exit(main())
