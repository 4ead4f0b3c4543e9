"""The tokenizer of a model spec: the checkpoint's own, or the built-in byte tokenizer."""

from __future__ import annotations

from glmcheck.data.tokenizer import ByteTokenizer
from glmcheck.model.load import ModelSpec

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")  # any of them: a checkpoint ships one


class CheckpointTokenizer:
    """A local Hugging Face tokenizer behind the small interface the checks use."""

    def __init__(self, path: str):
        from pathlib import Path

        from transformers import AutoTokenizer

        if not any((Path(path) / name).is_file() for name in TOKENIZER_FILES):
            raise FileNotFoundError(f"checkpoint {path!r} ships no tokenizer (none of {', '.join(TOKENIZER_FILES)}), "
                                    f"so text prompts cannot be encoded for it; add its tokenizer files, or use a "
                                    f"--model preset (the built-in byte tokenizer)")
        try:
            self.inner = AutoTokenizer.from_pretrained(path, local_files_only=True)
        except (OSError, ValueError) as err:  # transformers' own message spans lines: kept whole, on one
            raise FileNotFoundError(f"checkpoint {path!r} has no usable tokenizer: {' '.join(str(err).split())}") \
                from None

    @property
    def bos_id(self) -> int | None:
        return self.inner.bos_token_id

    @property
    def eos_id(self) -> int | None:
        return self.inner.eos_token_id

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        return self.inner.encode(text, add_special_tokens=add_bos)

    def token_text(self, token: int) -> str:
        return self.inner.decode([token])


def model_tokenizer(spec: ModelSpec, vocab_size: int):
    """The checkpoint's tokenizer when spec names one, else a ByteTokenizer over vocab_size."""
    if spec.checkpoint:
        return CheckpointTokenizer(spec.checkpoint)
    return ByteTokenizer(vocab_size)
