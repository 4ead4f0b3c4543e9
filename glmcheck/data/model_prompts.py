"""The prompt a model check feeds a model: natural text for a checkpoint, seeded ids for a preset.

A checkpoint with a tokenizer (a trained model or a real GLM one) has learned language,
so its checks read windows of the trained models' corpus's held-out text, encoded by its own tokenizer
(`glmcheck.data.heldout`); a dummy preset cannot speak (nor can a checkpoint of dummy weights,
which ships no tokenizer), so it reads seeded random ids (`glmcheck.data.prompts.seeded_prompt`), the
prompts of every recorded preset result.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import torch

from glmcheck.data.heldout import heldout_stream, natural_prompt
from glmcheck.data.model_tokenizer import TOKENIZER_FILES, model_tokenizer
from glmcheck.data.prompts import seeded_prompt
from glmcheck.model.load import ModelSpec


def reads_text(spec: ModelSpec) -> bool:
    """True when the model's prompts are natural text: a checkpoint that ships a tokenizer."""
    return bool(spec.checkpoint) and any((Path(spec.checkpoint) / f).is_file() for f in TOKENIZER_FILES)


def prompt_source(spec: ModelSpec) -> str:
    """What `model_prompt` draws from, for records and tables."""
    return "held-out text (data/resources/corpus)" if reads_text(spec) else "seeded random ids"


@lru_cache(maxsize=4)
def _stream(checkpoint: str, vocab_size: int) -> tuple[int, ...]:
    return tuple(heldout_stream(model_tokenizer(ModelSpec(checkpoint=checkpoint), vocab_size)))


def model_prompt(spec: ModelSpec, vocab_size: int, tokens: int, seed: int,
                 device: torch.device | str = "cpu") -> torch.Tensor:
    """[1, tokens] int64 prompt ids for the model `spec` describes (see the module docstring)."""
    if not reads_text(spec):
        return seeded_prompt(vocab_size, tokens, seed, device)
    tokenizer = model_tokenizer(spec, vocab_size)
    return natural_prompt(tokenizer, tokens, seed, device, stream=list(_stream(spec.checkpoint, vocab_size)))
