"""Compile a model check's Triton kernels in a second process while the check imports and builds its model.

Compile ahead (`glmcheck.checks.compile_ahead`) runs after the exact reference's forward, which comes after the
imports (11-17 s on the H200 image) and the build: on a cold Triton cache (a fresh machine, or a kernel just edited)
the check then still waits for the slowest backend's compiles (docs/performance.md, "Compile in a second process").
Yet a check's attention calls follow from its options alone: per prompt length T, q [T, H/tp, d_qk] bf16, kv
[T, d_qk] bf16, indices [T, min(index_topk, T)] int32 holding each token's causal picks (-1 past them), no lengths.
So the command line, before its own heavy imports, starts `python -m glmcheck.evaluate.precompile_child SPEC`: a child
that imports only torch, Triton and glmcheck's backends, makes such calls with seeded contents and runs compile
ahead on them, filling Triton's on-disk cache, which the parent shares. The parent's compile ahead waits for the
child (`wait`, at most WAIT_SECONDS) and then finds those variants cached. A variant the prediction misses compiles
in the parent as before: the child changes when things compile, never what a check computes.

When: the command names its prompt lengths (`start_for`: layer0, drift, logits and the sweep in process; firsttoken
gives its prompt set, which the child tokenises with `tokenizers`, as transformers' fast tokenizer does), a CUDA
device node exists, not Triton's interpreter, not under torchrun, `GLMCHECK_COMPILE_AHEAD` and
`GLMCHECK_PRECOMPILE` not 0 (`GLMCHECK_PRECOMPILE=1` starts it without a device node: tests).
"""

from __future__ import annotations

import argparse
import atexit
import glob
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

ENV = "GLMCHECK_PRECOMPILE"
WAIT_SECONDS = 120.0  # the parent's longest wait for the child; past it the child is stopped
CALL_BYTES = 2 << 30  # a predicted call's q, kv and indices stay within this (larger lengths compile in the parent)
DEVICE_SHARE = 32  # ... and within 1/32 of the device's memory: the check's own forwards run beside the child
CHILD_MODULE = "glmcheck.evaluate.precompile_child"  # the child's entry point (it resolves the check's backends)
_OFF = ("0", "false", "no", "off")
PROMPTS = "prompts"  # a command's precompile_tokens for "the lengths of my prompt set" (firsttoken)
_child: subprocess.Popen | None = None


@dataclass(frozen=True)
class PrecompileSpec:
    """What the child needs: the attention geometry (heads = all heads, tp the TP degree, latent_dim + rope_dim =
    d_qk, index_topk), the prompt lengths, and the backend options of the check (`CheckOptions` fields: backends
    None is the default set of the device)."""

    heads: int
    tp: int
    latent_dim: int
    rope_dim: int
    index_topk: int
    tokens: tuple[int, ...]
    backends: str | None
    band: int
    exact: str
    baseline: str | None
    deterministic: bool
    kv_cache_dtype: str | None
    device: str | None
    prompts: str | None = None  # firsttoken: its prompt set (or JSONL path), whose lengths the child tokenises
    limit: int | None = None
    continue_tokens: int = 0
    tokenizer: str | None = None  # a folder holding tokenizer.json; None: the byte tokenizer over vocab_size
    vocab_size: int = 0
    qk_head_dim: int = 0  # transformers' dense attention (hf_sdpa): query/key and value head dims
    v_head_dim: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> PrecompileSpec:
        fields = json.loads(text)
        fields["tokens"] = tuple(fields["tokens"])
        return cls(**fields)


def model_geometry(model: str | None, checkpoint: str | None) -> dict | None:
    """The attention fields of a preset, a trained model or a checkpoint's config.json (without transformers), or
    None when they cannot be read."""
    from glmcheck.model.presets import PRESETS
    from glmcheck.model.trained import MODELS_DIR, TRAINED_MODELS

    if checkpoint is None and model in PRESETS:
        return dict(PRESETS[model].fields)
    path = Path(checkpoint) if checkpoint is not None else MODELS_DIR / model if model in TRAINED_MODELS else None
    try:
        return json.loads((path / "config.json").read_text()) if path is not None else None
    except (OSError, ValueError):
        return None


def wanted(device: str | None = None) -> bool:
    """Whether a check on `device` (None: the default) should start the child (module docstring)."""
    choice = os.environ.get(ENV, "").strip().lower()
    if choice in _OFF or os.environ.get("GLMCHECK_COMPILE_AHEAD", "").strip().lower() in _OFF:
        return False
    if os.environ.get("TRITON_INTERPRET", "") not in ("", "0") or "WORLD_SIZE" in os.environ:
        return False
    if device is not None and not str(device).startswith("cuda"):
        return False
    if choice in ("1", "true", "yes", "on"):
        return True
    return os.environ.get("CUDA_VISIBLE_DEVICES", None) not in ("", "-1") and bool(glob.glob("/dev/nvidia[0-9]*"))


def spec_for(ns: argparse.Namespace, tokens: list[int] | str) -> PrecompileSpec | None:
    """The child's spec for a parsed model-check command line and its prompt lengths (PROMPTS: firsttoken's, from its
    prompt set), or None when the geometry or the tokenizer cannot be read without the model code."""
    from glmcheck.checks.band import DEFAULT_BAND, SWEEP_BAND
    from glmcheck.data.prompts import default_prompt_set
    from glmcheck.model.trained import MODELS_DIR, TRAINED_MODELS

    geometry = model_geometry(getattr(ns, "model", None), getattr(ns, "checkpoint", None))
    try:
        heads, latent, rope = (int(geometry[k]) for k in ("num_attention_heads", "kv_lora_rank", "qk_rope_head_dim"))
        topk, vocab = int(geometry["index_topk"]), int(geometry.get("vocab_size", 0))
        qk_dim = int(geometry.get("qk_nope_head_dim", 0)) + rope
        v_dim = int(geometry.get("v_head_dim", 0))
    except (TypeError, KeyError, ValueError):
        return None
    band = ns.band if getattr(ns, "band", None) is not None else SWEEP_BAND if ns.command == "sweep" else DEFAULT_BAND
    prompts = tokenizer = None
    if tokens == PROMPTS:  # firsttoken (`glmcheck.evaluate.model_checks.firsttoken`: its default set, its tokenizer)
        trained = ns.checkpoint is None and ns.model in TRAINED_MODELS
        prompts = ns.prompts or default_prompt_set(trained)
        folder = ns.checkpoint or (str(MODELS_DIR / ns.model) if trained else None)
        if folder is not None and not (Path(folder) / "tokenizer.json").is_file():
            return None  # another tokenizer format: read only by transformers
        tokenizer = folder
    return PrecompileSpec(heads, ns.tp, latent, rope, topk, () if tokens == PROMPTS else tuple(tokens), ns.backends,
                          band, ns.exact, ns.baseline, ns.deterministic, ns.kv_cache_dtype, ns.device, prompts,
                          getattr(ns, "limit", None), getattr(ns, "continue_tokens", 0), tokenizer, vocab,
                          qk_dim, v_dim)


def start_for(ns: argparse.Namespace) -> bool:
    """Start the child for a parsed command line whose command names its prompt lengths (`ns.precompile_tokens`,
    a function of ns giving a list, PROMPTS for its prompt set's, or None). Returns whether a child was
    started. Never raises for the child's sake: a check runs the same without it."""
    lengths = getattr(ns, "precompile_tokens", None)
    tokens = lengths(ns) if lengths is not None else None
    if not tokens or not wanted(getattr(ns, "device", None)):
        return False
    spec = spec_for(ns, tokens)
    return spec is not None and start(spec)


def start(spec: PrecompileSpec) -> bool:
    """Start the child (CHILD_MODULE) for `spec`, its output discarded; one child per process."""
    global _child
    if _child is not None:
        return False
    try:
        _child = subprocess.Popen([sys.executable, "-m", CHILD_MODULE, spec.to_json()],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        return False
    atexit.register(stop)
    return True


def wait(timeout: float = WAIT_SECONDS) -> int | None:
    """Wait for a running child (at most `timeout` s, then stop it); its exit code, or None when there was none or
    it was stopped."""
    global _child
    if _child is None:
        return None
    try:
        return _child.wait(timeout)
    except subprocess.TimeoutExpired:
        stop()
        return None
    finally:
        _child = None


def stop() -> None:
    """Stop a running child (at exit, or past the wait); Triton writes its cache entries whole, so none is left
    half-written."""
    global _child
    if _child is not None and _child.poll() is None:
        _child.kill()
        _child.wait()
    _child = None


def causal_picks(tokens: int, topk: int, device, seed: int = 0):
    """[tokens, min(topk, tokens)] int32: token t's picks among positions <= t by one seeded priority per position
    (neighbouring tokens share most of them, as the indexer's do), -1 where t has fewer than topk positions."""
    import torch

    width = min(topk, tokens)
    gen = torch.Generator(device=device).manual_seed(seed)
    priority = torch.rand(tokens, generator=gen, device=device)
    out = torch.empty((tokens, width), dtype=torch.int32, device=device)
    step = max(1, (64 << 20) // (4 * tokens))  # rows a chunk: 64 MiB of scores
    for start in range(0, tokens, step):
        rows = torch.arange(start, min(start + step, tokens), device=device)
        scores = priority.expand(rows.numel(), tokens).masked_fill(
            torch.arange(tokens, device=device)[None, :] > rows[:, None], -1.0)
        picks = scores.topk(width, dim=1).indices
        out[start:start + rows.numel()] = torch.where(picks > rows[:, None], -1, picks).to(torch.int32)
    return out


def prompt_lengths(spec: PrecompileSpec) -> list[int]:
    """The prefill lengths of `spec`: its tokens, or each prompt of its set tokenised (with the BOS the checks add)
    and, with continue_tokens, every length a continuation's prefills take; sorted, each once."""
    if spec.prompts is None:
        return sorted(set(spec.tokens))
    from glmcheck.data.prompts import load_prompts

    if spec.tokenizer is not None:
        from tokenizers import Tokenizer

        encode = Tokenizer.from_file(str(Path(spec.tokenizer) / "tokenizer.json")).encode
        counts = [len(encode(p.prompt).ids) for p in load_prompts(spec.prompts, spec.limit)]
    else:
        from glmcheck.data.tokenizer import ByteTokenizer

        byte = ByteTokenizer(spec.vocab_size)
        counts = [len(byte.encode(p.prompt)) for p in load_prompts(spec.prompts, spec.limit)]
    return sorted({n + step for n in counts for step in range(spec.continue_tokens + 1)})


def predicted_calls(spec: PrecompileSpec, device, budget: int = CALL_BYTES) -> list:
    """One `KernelCall` per prefill length of `spec` (`prompt_lengths`) whose tensors fit `budget` bytes, seeded
    contents."""
    import torch

    from glmcheck.model.kernel_call import KernelCall

    d_qk, per_rank = spec.latent_dim + spec.rope_dim, spec.heads // spec.tp
    calls = []
    for tokens in prompt_lengths(spec):
        width = min(spec.index_topk, tokens)
        if tokens * (per_rank * d_qk * 2 + d_qk * 2 + width * 4) > budget:
            continue
        gen = torch.Generator(device=device).manual_seed(tokens)
        q = torch.randn(tokens, per_rank, d_qk, generator=gen, device=device).to(torch.bfloat16)
        kv = torch.randn(tokens, d_qk, generator=gen, device=device).to(torch.bfloat16)
        calls.append(KernelCall(q, kv, causal_picks(tokens, spec.index_topk, device), None, d_qk ** -0.5,
                                spec.latent_dim))
    return calls
