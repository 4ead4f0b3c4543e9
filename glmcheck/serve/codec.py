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

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        """Token ids of `text`, preceded by BOS when the tokenizer has one and `add_bos` (as the checks'
        prompts; a rendered chat template brings its own)."""
        return list(self.tokenizer.encode(text, add_bos=add_bos))

    @property
    def chat_template(self) -> str | None:
        """The checkpoint tokenizer's own chat template (None: it has none, or the byte tokenizer)."""
        inner = getattr(self.tokenizer, "inner", None)
        template = getattr(inner, "chat_template", None)
        return template if isinstance(template, str) and template.strip() else None

    def special_text(self, name: str) -> str:
        """The text of the tokenizer's `bos` or `eos` token ("" without one), for a chat template."""
        token = getattr(self.tokenizer, f"{name}_id", None)
        return self.token_text(token) if token is not None else ""

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


CONTEXT_TOKENS = 4  # ids decoded before a new one, so tokenizers that strip a lone token's leading space don't


class TextWidths:
    """How many characters of the decoded text each id of a run adds (`text_offset`s that index `text`).

    `width(id)` decodes the new id after up to CONTEXT_TOKENS earlier ones and returns the characters it
    adds: 0 for a special token the text leaves out (the BOS the server put before a text prompt) and for
    a byte that ends in the middle of a character (U+FFFD last: the character's width goes to the id that
    completes it), as an incremental detokenizer emits text."""

    def __init__(self, codec: TokenCodec, skip_special: bool = True, at: int = 0):
        self.codec, self.skip_special = codec, skip_special
        self.at = at  # where the next id's text starts
        self._done: list[int] = []  # ids whose text is counted
        self._pending: list[int] = []  # ids whose text is not complete yet

    def width(self, token: int) -> int:
        self._pending.append(token)
        context = self._done[-CONTEXT_TOKENS:]
        before = self.codec.decode(context, self.skip_special) if context else ""
        after = self.codec.decode(context + self._pending, self.skip_special)
        if after.endswith("\ufffd"):
            return 0
        self._done += self._pending
        self._pending = []
        return max(len(after) - len(before), 0)

    def offsets(self, tokens: Sequence[int]) -> list[int]:
        """The offset of each of `tokens`, continuing this run (from `at`)."""
        found = []
        for token in tokens:
            found.append(self.at)
            self.at += self.width(token)
        return found
