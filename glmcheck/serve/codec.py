"""Text <-> token ids for the server: the model's tokenizer (`glmcheck.data.model_tokenizer`) behind
the three calls the API needs, whichever tokenizer it is (a checkpoint's Hugging Face tokenizer or the
built-in byte tokenizer of the dummy presets)."""

from __future__ import annotations

from collections.abc import Sequence


class TokenCodec:
    """encode (BOS first, as the checks encode prompts), decode (the text of generated ids) and
    token_text (one id's own text: the strings of `tokens` and `top_logprobs`, memoised)."""

    def __init__(self, tokenizer, vocab_size: int):
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self._texts: dict[int, str] = {}

    @property
    def eos_id(self) -> int | None:
        return getattr(self.tokenizer, "eos_id", None)

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, preceded by BOS when the tokenizer has one (as the checks' prompts)."""
        return list(self.tokenizer.encode(text))

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        """Text of `ids`. A checkpoint tokenizer drops special tokens when `skip_special`; the byte
        tokenizer always drops its three special ids (it has no text for them)."""
        inner = getattr(self.tokenizer, "inner", None)
        if inner is not None:
            return inner.decode(list(ids), skip_special_tokens=skip_special)
        return self.tokenizer.decode(list(ids))

    def token_text(self, token: int) -> str:
        """The tokenizer's text of one id (`token_text`: e.g. `<bos>`, ` b`, `<0x0A>`)."""
        text = self._texts.get(token)
        if text is None:
            text = self._texts[token] = self.tokenizer.token_text(token)
        return text
