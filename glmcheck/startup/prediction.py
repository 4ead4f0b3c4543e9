"""The attention calls a model check will make, predicted from its options alone (`PrecompileSpec`), for the
precompile child (`glmcheck.startup.precompile`) to compile ahead.

Per prompt length T: q [T, H/tp, d_qk] bf16, kv [T, d_qk] bf16, indices [T, min(index_topk, T)] int32 holding each
token's causal picks (-1 past them), no lengths: the calls the attention swap makes in a one-shot forward, the same
shapes, strides and integer arguments, hence the same kernel variants. The geometry comes from a preset, a trained
model or a checkpoint's config.json, without transformers; firsttoken's lengths from its prompt set, tokenised with
`tokenizers` as transformers' fast tokenizer does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

CALL_BYTES = 2 << 30  # a predicted call's q, kv and indices stay within this (larger lengths compile in the parent)
DEVICE_SHARE = 32  # ... and within 1/32 of the device's memory: the check's own forwards run beside the child


@dataclass(frozen=True)
class PrecompileSpec:
    """What the precompile child needs: the attention geometry (heads = all heads, tp the TP degree, latent_dim +
    rope_dim = d_qk, index_topk), the prompt lengths, and the backend options of the check (`CheckOptions` fields:
    backends None is the default set of the device; band the band's size; exact fp32 or fp64)."""

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
    band_impl: str | None = None  # the band's and the fp32 reference's forms (`glmcheck.backends.forms`; None: the
    reference_impl: str | None = None  # environment's), so that the child compiles the kernels the check will run

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


def predict_spec(*, model: str | None, checkpoint: str | None, tp: int, backends: str | None, band: int,
                 exact: str, baseline: str | None, deterministic: bool, kv_cache_dtype: str | None,
                 device: str | None, tokens: Sequence[int] | None = None, prompts: str | None = None,
                 limit: int | None = None, continue_tokens: int = 0, band_impl: str | None = None,
                 reference_impl: str | None = None) -> PrecompileSpec | None:
    """The spec of a check on `model` or `checkpoint` with these options (`CheckOptions` fields; `band` the band's
    size, resolved; `exact` fp32 or fp64; the forms None for the environment's) at the prompt lengths `tokens`, or, with
    `tokens` None, at those of the prompt set `prompts` (None: firsttoken's default set for the model; `limit` prompts,
    each continued by `continue_tokens`). None when the geometry or the tokenizer cannot be read without the model
    code."""
    from glmcheck.data.prompts import default_prompt_set
    from glmcheck.model.trained import MODELS_DIR, TRAINED_MODELS

    geometry = model_geometry(model, checkpoint)
    try:
        heads, latent, rope = (int(geometry[k]) for k in ("num_attention_heads", "kv_lora_rank", "qk_rope_head_dim"))
        topk, vocab = int(geometry["index_topk"]), int(geometry.get("vocab_size", 0))
        qk_dim = int(geometry.get("qk_nope_head_dim", 0)) + rope
        v_dim = int(geometry.get("v_head_dim", 0))
    except (TypeError, KeyError, ValueError):
        return None
    tokenizer = None
    if tokens is None:  # firsttoken (`glmcheck.evaluate.model_checks.firsttoken`: its default set, its tokenizer)
        trained = checkpoint is None and model in TRAINED_MODELS
        prompts = prompts or default_prompt_set(trained)
        folder = checkpoint or (str(MODELS_DIR / model) if trained else None)
        if folder is not None and not (Path(folder) / "tokenizer.json").is_file():
            return None  # another tokenizer format: read only by transformers
        tokenizer = folder
    else:
        prompts = None
    return PrecompileSpec(heads, tp, latent, rope, topk, () if tokens is None else tuple(tokens), backends, band,
                          exact, baseline, deterministic, kv_cache_dtype, device, prompts, limit, continue_tokens,
                          tokenizer, vocab, qk_dim, v_dim, band_impl, reference_impl)


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
