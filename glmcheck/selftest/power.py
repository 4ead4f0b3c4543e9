"""Power curves: how often each check catches a fault of each kind as the fault grows.

A rate at one fault size says little about a check; a curve says which fault it sees at 90 % power, as
`glmcheck tasks` states its detectable drop. Each family below wraps a base kernel (the kernel under test on a GPU;
on the CPU a band variant held out of the band, `band:BAND+1`: a legitimate kernel exact but for rounding, so the
interpreter's minutes a forward are not spent) and grows one fault:

- `output_scale`   the output times 1 + e;
- `softmax_scale`  the softmax scale times 1 + e;
- `wrong_rows`     a share f of the tokens (evenly spread) attend over their neighbour's selection;
- `slots_dropped`  a share f of each token's valid slots (evenly spread through its ranking) ignored;
- `empty_as_row0`  a share f of the tokens read KV row 0 in their first empty slot (tokens with one).

`measure_power` runs each check once per seed with every (family, size) as a row beside the band, and
`power_table` reports per check and family the detection rate at each size and the smallest size caught in at
least 90 % of the seeds (`POWER`). docs/reliability.md, "Power curves".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from glmcheck.backends.registry import backend_names, get_backend, register_backend
from glmcheck.kernels.validate import valid_slot_mask

POWER = 0.9  # the detection rate a size must reach to count as seen

KernelFn = Callable[..., torch.Tensor]


def _spread(count: int, share: float, device) -> torch.Tensor:
    """[count] bool: round(share * count) of the indices, evenly spread (index i when its rounded multiple of
    `share` steps: floor((i + 1) s + 1/2) > floor(i s + 1/2))."""
    i = torch.arange(count, device=device, dtype=torch.float64)
    return _steps(i, share)


def _steps(i: torch.Tensor, share: float) -> torch.Tensor:
    return torch.floor((i + 1) * share + 0.5) > torch.floor(i * share + 0.5)


class Altered:
    """A fault kernel that counts what it altered (tokens, or slots), so a size that alters nothing at a prompt's
    shape (one token in 100 of the few that have an empty slot) is reported as inert, not as a miss."""

    def __init__(self, fn: Callable[..., tuple[torch.Tensor, int]]):
        self.fn, self.altered = fn, 0

    def __call__(self, q, kv, indices, sm_scale, d_v=512, *, topk_length=None) -> torch.Tensor:
        out, altered = self.fn(q, kv, indices, sm_scale, d_v, topk_length=topk_length)
        self.altered += altered
        return out


def output_scale(base: KernelFn, e: float) -> KernelFn:
    def kernel(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
        out = base(q, kv, indices, sm_scale, d_v, topk_length=topk_length)
        return (out.float() * (1 + e)).to(out.dtype), indices.shape[0]
    return Altered(kernel)


def softmax_scale(base: KernelFn, e: float) -> KernelFn:
    def kernel(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
        return base(q, kv, indices, sm_scale * (1 + e), d_v, topk_length=topk_length), indices.shape[0]
    return Altered(kernel)


def wrong_rows(base: KernelFn, share: float) -> KernelFn:
    def kernel(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
        tokens = indices.shape[0]
        hit = _spread(tokens - 1, share, indices.device).nonzero().flatten() if tokens > 1 else \
            torch.zeros(0, dtype=torch.long, device=indices.device)
        wrong = indices.clone()
        wrong[hit] = indices[hit + 1]
        lengths = None
        if topk_length is not None:
            lengths = topk_length.clone()
            lengths[hit] = topk_length[hit + 1]
        return base(q, kv, wrong, sm_scale, d_v, topk_length=lengths), hit.numel()
    return Altered(kernel)


def slots_dropped(base: KernelFn, share: float) -> KernelFn:
    def kernel(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
        valid = valid_slot_mask(indices, kv.shape[0], topk_length)
        rank = valid.cumsum(dim=1) - 1  # each valid slot's place in its token's ranking
        drop = valid & _steps(rank.double(), share)
        return base(q, kv, torch.where(valid & ~drop, indices, -1), sm_scale, d_v), int(drop.sum())
    return Altered(kernel)


def empty_as_row0(base: KernelFn, share: float) -> KernelFn:
    def kernel(q, kv, indices, sm_scale, d_v=512, *, topk_length=None):
        valid = valid_slot_mask(indices, kv.shape[0], topk_length)
        wrong = torch.where(valid, indices, -1)
        has_empty = (~valid).any(dim=1)
        candidates = has_empty.nonzero().flatten()
        hit = candidates[_spread(candidates.numel(), share, indices.device)]
        first_empty = (~valid).int().argmax(dim=1)
        wrong[hit, first_empty[hit]] = 0
        return base(q, kv, wrong, sm_scale, d_v), hit.numel()
    return Altered(kernel)


@dataclass(frozen=True)
class FaultFamily:
    """One kind of fault grown over `sizes` (`unit` says what a size is)."""

    name: str
    make: Callable[[KernelFn, float], KernelFn]
    sizes: tuple[float, ...]
    unit: str


FAMILIES: dict[str, FaultFamily] = {f.name: f for f in (
    FaultFamily("output_scale", output_scale, (3e-4, 1e-3, 3e-3, 1e-2), "e in x (1 + e)"),
    FaultFamily("softmax_scale", softmax_scale, (3e-4, 1e-3, 3e-3, 1e-2), "e in x (1 + e)"),
    FaultFamily("wrong_rows", wrong_rows, (1 / 128, 1 / 32, 1 / 8, 1 / 2), "share of the tokens"),
    FaultFamily("slots_dropped", slots_dropped, (1 / 32, 1 / 8, 1 / 4, 1 / 2), "share of each token's slots"),
    FaultFamily("empty_as_row0", empty_as_row0, (1 / 100, 1 / 30, 1 / 10, 1 / 3),
                "share of the tokens with an empty slot"),
)}


def row_name(family: str, size: float, base: str) -> str:
    return f"power:{family}:{size:.4g}:on:{base}"


_KERNELS: dict[str, Altered] = {}  # the registered rows' kernels, whose `altered` counts are read per run


def register_family_rows(base: str, families: Sequence[str]) -> dict[str, tuple[str, float]]:
    """Register every (family, size) of `families` wrapping backend `base`; {row name: (family, size)}."""
    kernel = get_backend(base).fn
    known, rows = set(backend_names()), {}
    for name in families:
        if name not in FAMILIES:
            raise ValueError(f"--families must name some of {', '.join(FAMILIES)}, got {name!r}")
        family = FAMILIES[name]
        for size in family.sizes:
            row = row_name(name, size, base)
            if row not in known:
                _KERNELS[row] = family.make(kernel, size)
                register_backend(row, _KERNELS[row], f"{name} {size:g} ({family.unit}) on {base}",
                                 source="glmcheck.selftest.power")
            rows[row] = (name, size)
    return rows


@dataclass
class PowerPoint:
    """How often a check caught one (family, size) over the seeds."""

    check: str
    family: str
    size: float
    caught: int = 0
    runs: int = 0
    inert: int = 0  # runs in which the fault altered nothing at the prompt's shape (neither caught nor missed)


def power_table(points: list[PowerPoint]) -> str:
    """Markdown: per check and family, the detection at each size and the smallest size seen at POWER."""
    from glmcheck.records.tables import markdown_table

    lines = []
    for check in dict.fromkeys(p.check for p in points):
        for family in dict.fromkeys(p.family for p in points if p.check == check):
            mine = sorted((p for p in points if p.check == check and p.family == family), key=lambda p: p.size)
            seen = next((p.size for p in mine if p.runs and p.caught / p.runs >= POWER), None)
            lines.append([check, family, FAMILIES[family].unit,
                          " ".join(f"{p.size:.3g}: " + (f"{p.caught}/{p.runs}" if p.runs else "inert") for p in mine),
                          "-" if seen is None else f"{seen:.3g}"])
    return markdown_table(["check", "fault", "size", "caught / runs at each size",
                           f"smallest size caught >= {POWER:.0%}"], lines)


def power_rows(check: str, result) -> dict[str, str]:
    """{backend: verdict} of a check's judged rows (layer0 and logits results)."""
    out = {}
    for row in result.rows:
        if row.comparison.startswith("noise band:") or "(per-token)" in row.comparison or row.verdict == "-":
            continue
        out[row.backend] = row.verdict
    return out


def caught_rate(points: list[PowerPoint], check: str, family: str) -> list[tuple[float, float]]:
    """[(size, detection rate)] of one curve, sizes ascending (NaN where nothing ran)."""
    mine = sorted((p for p in points if p.check == check and p.family == family), key=lambda p: p.size)
    return [(p.size, p.caught / p.runs if p.runs else math.nan) for p in mine]


POWER_CHECKS = ("layer0", "logits")


def default_base(device: torch.device, band_size: int) -> str:
    """The kernel the faults wrap: the kernel under test on a GPU; on the CPU the band variant just past the band
    (legitimate, exact but for rounding; the interpreter would spend minutes a forward)."""
    return "triton_sparse_mla" if device.type == "cuda" else f"band:{band_size + 1}"


def measure_power(model="ref-cpu", seeds: Sequence[int] = range(10), tokens: int = 256,
                  checks: Sequence[str] = POWER_CHECKS, families: Sequence[str] = tuple(FAMILIES),
                  band_size: int = 4, base: str | None = None, device: torch.device | str = "cpu",
                  progress: Callable[[str], None] | None = None) -> list[PowerPoint]:
    """Run `checks` over `seeds` with every (family, size) as a row (module docstring); one PowerPoint per
    (check, family, size). `model`: a preset or trained-model name, or a ModelSpec; a seed picks the weights
    of a preset, the held-out window of a checkpoint (as `glmcheck.selftest.rates`)."""
    import dataclasses

    from glmcheck.checks.layer0 import run_layer0
    from glmcheck.checks.logits import run_logits
    from glmcheck.data.heldout import heldout_stream, natural_prompt
    from glmcheck.data.model_prompts import reads_text
    from glmcheck.data.model_tokenizer import model_tokenizer
    from glmcheck.data.prompts import seeded_prompt
    from glmcheck.model.load import ModelSpec, load_model

    for check in checks:
        if check not in POWER_CHECKS:
            raise ValueError(f"--checks must name some of {', '.join(POWER_CHECKS)} for power curves, got {check!r}")
    device = torch.device(device)
    base = base or default_base(device, band_size)
    rows = register_family_rows(base, families)
    spec = model if isinstance(model, ModelSpec) else ModelSpec(preset=model)
    points = {(c, f, s): PowerPoint(c, f, s) for c in checks for f, s in rows.values()}
    nets: dict[bool, torch.nn.Module] = {}
    stream = tokenizer = None
    for seed in seeds:
        seeded = spec if spec.checkpoint else dataclasses.replace(spec, seed=seed)
        for check in checks:
            layer0_only = check == "layer0"
            if spec.checkpoint and layer0_only in nets:
                net = nets[layer0_only]
            else:
                net = nets[layer0_only] = load_model(seeded, device, layer0_only=layer0_only)
            if reads_text(spec):
                if tokenizer is None:
                    tokenizer = model_tokenizer(spec, net.config.vocab_size)
                    stream = heldout_stream(tokenizer)
                prompt = natural_prompt(tokenizer, tokens, seed, device, stream=stream)
            else:
                prompt = seeded_prompt(net.config.vocab_size, tokens, seed, device)
            for name in rows:
                _KERNELS[name].altered = 0
            result = run_layer0(net, prompt, list(rows), band_size=band_size) if layer0_only else \
                run_logits(net, [prompt], list(rows), band_size=band_size)
            for name, verdict in power_rows(check, result).items():
                point = points[(check, *rows[name])]
                if _KERNELS[name].altered == 0:
                    point.inert += 1
                    continue
                point.runs += 1
                point.caught += verdict == "FAIL"
            if progress is not None:
                progress(f"seed {seed} {check} done")
            if not spec.checkpoint:
                nets.clear()
    return list(points.values())
