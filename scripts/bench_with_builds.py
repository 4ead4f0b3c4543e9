"""Run `glmcheck bench` with the union build "auto" picks replaced by measured choices.

Usage (GPU machine): PYTHONPATH=. python3 scripts/bench_with_builds.py BEST_JSON [bench args...]
BEST_JSON is what `scripts/build_sweep.py --best` wrote: {"heads": {"G": method}}. Where it
names no method the library's own choice stands. An experiment tool: the choices that win go
into `glmcheck.kernels.union.choose_build` afterwards.
"""

from __future__ import annotations

import json
import sys

from glmcheck.cli import main
from glmcheck.kernels import union as union_mod


def install(best: dict[str, dict[str, str]]) -> None:
    """Patch union_mod.choose_build with the H = 8 choices per G (the build does not see H)."""
    by_group = {int(g): method for g, method in best.get("8", {}).items()}
    library_choice = union_mod.choose_build

    def measured(G: int, topk: int, merge_legal: bool) -> str:
        method = by_group.get(G)
        if method is None or (method in ("merge", "tree", "bitonic") and not merge_legal):
            return library_choice(G, topk, merge_legal)
        return method

    union_mod.choose_build = measured
    print(f"union builds by G: {by_group}", flush=True)


if __name__ == "__main__":
    with open(sys.argv[1]) as handle:
        install(json.load(handle))
    sys.exit(main(["bench", *sys.argv[2:]]))
