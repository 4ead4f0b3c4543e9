"""What a server serves, checked before anything is built (`prepare`), then built (`ServePlan.load`).

`prepare` resolves the model spec's config (a checkpoint's tensors checked against it), the device,
the TP degree, the backend (a built-in, an installed entry point or NAME=MODULE:FUNCTION /
NAME=FILE.py:FUNCTION, loaded and validated for this device and head count), the tokenizer and the
served model name; each problem is a ValueError naming the option, so the CLI answers it in one line
before binding a port or building the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from glmcheck.checks.runner import SwapOptions
from glmcheck.model.load import ModelSpec, config_of, load_model, resolve_device
from glmcheck.serve.codec import TokenCodec
from glmcheck.serve.engine import Served


@dataclass(frozen=True)
class ServeSettings:
    """The server's choices: model, backend, device, emulated TP degree, swap options, served name
    (None: the trained model's, preset's or checkpoint directory's name) and top-k limit."""

    spec: ModelSpec
    backend: str
    device: str | None = None
    tp: int = 1
    kv_cache_dtype: str | None = None
    deterministic: bool = False
    served_name: str | None = None
    max_logprobs: int = 20
    chat_template: str | None = None  # a Jinja template file, or the template itself (as vLLM's --chat-template)


@dataclass
class ServePlan:
    """Checked settings, ready to build: the config, device, resolved backend name, its warnings,
    the tokenizer, the served name and what it stands for (`root`)."""

    settings: ServeSettings
    config: object
    device: torch.device
    backend: str
    codec: TokenCodec
    name: str
    root: str
    warnings: list[str] = field(default_factory=list)
    chat_template: str | None = None

    def load(self) -> Served:
        """Build the model on the device and return it served (with its `/glmcheck/info`)."""
        from glmcheck.backends.registry import backend_identity, backend_source
        from glmcheck.backends.validation import HF_NAMES
        from glmcheck.records.environment import config_hash, environment_metadata

        s = self.settings
        model = load_model(s.spec, self.device)
        model.eval()
        options = SwapOptions(tp=s.tp, kv_cache_dtype=s.kv_cache_dtype, deterministic=s.deterministic)
        source = "transformers (no swap)" if self.backend in HF_NAMES else backend_source(self.backend)
        info = {"backend": self.backend, "backend_source": source, "backend_identity": backend_identity(self.backend),
                "model": s.spec.describe(), "config_hash": config_hash(model.config),
                "layers": model.config.num_hidden_layers, "vocab_size": self.codec.vocab_size,
                "device": str(self.device), "tp": s.tp,
                "options": {"kv_cache_dtype": s.kv_cache_dtype, "deterministic": s.deterministic},
                "warnings": self.warnings, "environment": environment_metadata()}
        return Served(model, self.codec, self.backend, options, self.name, s.max_logprobs,
                      int(model.config.max_position_embeddings), self.root, info, self.chat_template)


def served_name(spec: ModelSpec) -> str:
    """The default served model name: the trained model's, the checkpoint directory's or the preset's."""
    if spec.trained:
        return spec.trained
    if spec.checkpoint:
        return Path(spec.checkpoint).resolve().name
    return spec.preset


def prepare(settings: ServeSettings) -> ServePlan:
    """Check `settings` without building the model (module docstring); ValueError naming the option."""
    from glmcheck.backends.validation import resolve_backend_names, validate_backends
    from glmcheck.data.model_tokenizer import model_tokenizer
    from glmcheck.model import distributed
    from glmcheck.model.checkpoint_files import check_tensors

    if distributed.current() is not None:
        raise ValueError("serve runs in one process (--tp emulates the TP slices there), not under torchrun")
    spec = settings.spec
    config = config_of(spec)
    if spec.checkpoint:
        check_tensors(spec.checkpoint, warn=False)
    device = resolve_device(settings.device)
    heads = config.num_attention_heads
    if isinstance(settings.tp, bool) or not isinstance(settings.tp, int) or settings.tp < 1 or heads % settings.tp:
        raise ValueError(f"--tp must divide the {heads} attention heads, got {settings.tp}")
    if not isinstance(settings.backend, str) or not settings.backend.strip() or "," in settings.backend:
        raise ValueError(f"--backend must name one backend, got {settings.backend!r}")
    backend = resolve_backend_names([settings.backend.strip()])[0]
    warnings = validate_backends([backend], device=device, heads=heads, tp=settings.tp,
                                 deterministic=settings.deterministic,
                                 latent_dims=(config.kv_lora_rank, config.qk_rope_head_dim),
                                 kv_cache_dtype=settings.kv_cache_dtype)
    if settings.kv_cache_dtype == "fp8_e4m3" and backend.startswith("hf_"):
        raise ValueError(f"--kv-cache-dtype fp8_e4m3 feeds the absorbed backends only, not {backend}")
    vocab = int(config.vocab_size)
    limit = settings.max_logprobs
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= vocab:
        raise ValueError(f"--max-logprobs must be an int in [1, {vocab}] (the vocabulary; the checks against a server "
                         f"need its top-1 logprob at least), got {limit!r}")
    codec = TokenCodec(model_tokenizer(spec, vocab), vocab)
    name = settings.served_name if settings.served_name is not None else served_name(spec)
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"--served-model-name must be a non-empty string, got {name!r}")
    root = str(spec.checkpoint) if spec.checkpoint else spec.preset
    return ServePlan(settings, config, device, backend, codec, name, root, warnings,
                     chat_template_text(settings.chat_template))


def chat_template_text(given: str | None) -> str | None:
    """`--chat-template`: a file's text, or the template given inline (one with a Jinja tag); ValueError
    naming the option otherwise."""
    from glmcheck.serve.chat import check_template

    if given is None:
        return None
    if not isinstance(given, str) or not given.strip():
        raise ValueError(f"--chat-template must name a Jinja template file or hold a template, got {given!r}")
    path = Path(given)
    if "{" not in given and "\n" not in given:
        if not path.is_file():
            raise ValueError(f"--chat-template: no file {given!r} (give a Jinja template file, or the template)")
        given = path.read_text(encoding="utf-8")
    check_template(given)
    return given
