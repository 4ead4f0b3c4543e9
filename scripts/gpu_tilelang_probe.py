"""One head count of SGLang's TileLang prefill, in a process of its own, before the bench: load the module, run it once
at a small point (its JIT compile for this head count, which TileLang's disk cache keeps for the bench's process),
gate it against the fp32 reference like every bench column. Prints one line and exits 0 when the head count passed,
1 when it was refused or failed, 2 when TileLang is absent; a crash or a hang stays in this process.

  python3 scripts/gpu_tilelang_probe.py HEADS [--tokens N]      (scripts/gpu_tilelang_bench.sh runs one per head count)
"""

from __future__ import annotations

import argparse
import time


def probe(heads: int, tokens: int, device: str = "cuda", topk: int | None = None) -> tuple[int, str]:
    """(exit code, the line to print) for `heads` heads at 1 x `tokens` (topk the bench's 2048 unless given)."""
    from glmcheck.backends.tilelang_sparse import find_tilelang, tilelang_available
    from glmcheck.bench.kernel import BenchPoint, run_point, tilelang_spec

    start = time.perf_counter()
    present, source = tilelang_available()
    if not present:
        return 2, f"H={heads} absent: {source}"
    loaded = time.perf_counter() - start
    result = run_point(BenchPoint(1, tokens, heads), [tilelang_spec()], topk=topk, device=device,
                       timer=lambda fn, rep_ms: 0.0)[0]  # gate only: nothing is timed
    first = find_tilelang().first_call_s.get(heads)
    when = f"load {loaded:.1f} s" + ("" if first is None else f", first call {first:.1f} s (compile included)")
    if result.ms is None:
        return 1, f"H={heads} {result.note or 'no result'} ({when})"
    return 0, f"H={heads} ok: rel-L2 {result.rel_l2:.3e} against fp32 at 1x{tokens} ({when})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("heads", type=int)
    parser.add_argument("--tokens", type=int, default=1024)
    args = parser.parse_args(argv)
    code, line = probe(args.heads, args.tokens)
    print(line, flush=True)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
