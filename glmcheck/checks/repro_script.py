"""The standalone script a minimal repro ships with (`glmcheck.checks.repro` writes it beside its tensor file).

It needs torch and safetensors only: the exact attention in fp64 is written out in it, and the kernel is loaded from
`NAME=module:function` or `NAME=file.py:function`; glmcheck is imported only to resolve a built-in backend named
alone (`triton_sparse_mla`, `band:5`). It prints the kernel's distance from the exact output beside the limits the
band gave on this call and exits 1 when the kernel still fails them, 0 when it does not.
"""

from __future__ import annotations

SCRIPT = '''\
"""Minimal repro of a glmcheck FAIL: {what}.
The call: {tokens} of its {of_tokens} tokens and {heads} of its {of_heads} heads ({origin}), in call.safetensors.

    python repro.py [--kernel SPEC] [--device cpu|cuda]

SPEC is the kernel as glmcheck's --backends names it (default {kernel!r}): NAME=module:function,
NAME=path/to/file.py:function, or a glmcheck built-in name (then glmcheck is imported to find it).
Exit 1: the kernel's output is beyond the limits the band of ideal bf16 kernels gave on this call (it reproduces);
exit 0: it is within them (fixed). Written by glmcheck {version}.
"""
import argparse, importlib, importlib.util, json, os, sys
from pathlib import Path

import torch
from safetensors import safe_open


def attention(q, kv, indices, sm_scale, d_v, topk_length=None):
    """Exact sparse-MLA prefill in fp64: per token and head, softmax over its valid slots of q.kv * sm_scale, times
    kv[:, :d_v]; a slot is valid when it names a row in [0, S) (and lies below topk_length[t])."""
    q, kv = q.double(), kv.double()
    valid = (indices >= 0) & (indices < kv.shape[0])
    if topk_length is not None:
        valid &= torch.arange(indices.shape[1], device=indices.device) < topk_length[:, None].long()
    rows = torch.where(valid[..., None], kv[indices.long().clamp(0, kv.shape[0] - 1)], 0.0)
    scores = torch.einsum("thd,tkd->thk", q, rows).mul(sm_scale).masked_fill(~valid[:, None, :], float("-inf"))
    probs = torch.where(valid.any(dim=1)[:, None, None], torch.softmax(scores, dim=-1), 0.0)
    return torch.einsum("thk,tkd->thd", probs, rows[..., :d_v])


def load_kernel(spec):
    if "=" not in spec:  # a glmcheck built-in backend, by name
        from glmcheck.backends.registry import get_backend
        return get_backend(spec)
    where, _, name = spec.split("=", 1)[1].rpartition(":")
    if where.endswith(".py"):
        found = importlib.util.spec_from_file_location(Path(where).stem, where)
        module = importlib.util.module_from_spec(found)
        found.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    return getattr(module, name)


def check(kernel, device="cpu", path=Path(__file__).with_name("call.safetensors")):
    with safe_open(str(path), "pt", device=device) as f:
        t = {{k: f.get_tensor(k) for k in f.keys()}}
        meta = json.loads(f.metadata()["repro"])
    call = (t["q"], t["kv"], t["indices"], meta["sm_scale"], meta["d_v"])
    exact = attention(*call, t.get("topk_length"))
    step = meta["temperature_step"]
    hot = attention(*call[:3], meta["sm_scale"] * (1 + step), meta["d_v"], t.get("topk_length"))
    u, e = (hot - exact) / step, exact
    d = kernel(*call, topk_length=t.get("topk_length")).double() - exact
    stats = {{"rel_l2": float(d.norm() / e.norm()),
             "token_max_rel_l2": float((d.flatten(1).norm(dim=1) / e.flatten(1).norm(dim=1).clamp_min(1e-300)).max()),
             "scale_bias": float((d * e).sum() / (e * e).sum()), "scale_bias_se": float((d * e).norm() / (e * e).sum()),
             "temperature_bias": float((d * u).sum() / (u * u).sum()),
             "temperature_bias_se": float((d * u).norm() / (u * u).sum())}}
    failed = [f"{{k}} {{stats[k]:.3e}} > {{meta['limits'][k]:.3e}}" for k in ("rel_l2", "token_max_rel_l2")
              if not stats[k] <= meta["limits"][k]]
    for k in ("scale_bias", "temperature_bias"):
        low, high = meta["limits"][k]
        widen = high - low + meta["bias_sigmas"] * stats[k + "_se"]
        if not low - widen <= stats[k] <= high + widen:
            failed.append(f"{{k}} {{stats[k]:+.2e}} outside [{{low - widen:+.2e}}, {{high + widen:+.2e}}]")
    print(json.dumps({{k: f"{{v:.4g}}" for k, v in stats.items()}}))
    print("REPRODUCES: " + "; ".join(failed) if failed else "within the band's limits: not reproduced (fixed)")
    return 1 if failed else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel", default={kernel!r}, help="the kernel to run (default: the one that failed)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    if args.kernel is None:
        sys.exit("name the kernel: --kernel NAME=module:function (glmcheck could not name an importable one)")
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports Triton
    sys.exit(check(load_kernel(args.kernel), args.device))
'''


def script_text(*, what: str, kernel: str | None, tokens: int, of_tokens: int, heads: int, of_heads: int,
                origin: str, version: str) -> str:
    """The script for one repro (module docstring)."""
    return SCRIPT.format(what=what, kernel=kernel, tokens=tokens, of_tokens=of_tokens, heads=heads,
                         of_heads=of_heads, origin=origin, version=version)
