"""A built-in, deterministic byte-level tokenizer for the dummy model presets (no downloads).

Id mapping:
    0 = BOS, 1 = EOS, 2 = PAD, and byte b (0..255) = id 3 + b, so byte ids span 3..258.
Ids 259 .. vocab_size - 1 exist in the model's vocabulary but never come out of `encode`;
`decode` and `token_text` render them as `<id>`.
"""

from __future__ import annotations

from collections.abc import Iterable

BOS_ID = 0
EOS_ID = 1
PAD_ID = 2
BYTE_OFFSET = 3
NUM_BYTE_IDS = BYTE_OFFSET + 256  # 259: the smallest vocabulary that holds every byte

SPECIAL_NAMES = {BOS_ID: "<bos>", EOS_ID: "<eos>", PAD_ID: "<pad>"}


class ByteTokenizer:
    """UTF-8 bytes to ids (see the module docstring); needs vocab_size >= 259."""

    def __init__(self, vocab_size: int) -> None:
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
            raise ValueError(f"vocab_size must be an int >= {NUM_BYTE_IDS}, got {vocab_size!r}")
        if vocab_size < NUM_BYTE_IDS:
            raise ValueError(f"vocab_size must be >= {NUM_BYTE_IDS} (3 special ids + 256 bytes), "
                             f"got {vocab_size}")
        self._vocab_size = vocab_size

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    @property
    def bos_id(self) -> int:
        return BOS_ID

    @property
    def eos_id(self) -> int:
        return EOS_ID

    @property
    def pad_id(self) -> int:
        return PAD_ID

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        """Ids of `text`'s UTF-8 bytes, preceded by BOS when `add_bos`."""
        if not isinstance(text, str):
            raise ValueError(f"text must be a str, got {type(text).__name__}")
        ids = [BYTE_OFFSET + b for b in text.encode("utf-8")]
        return [BOS_ID, *ids] if add_bos else ids

    def decode(self, ids: Iterable[int]) -> str:
        """Text of `ids`: special ids skipped, ids >= 259 shown as `<id>`, bad UTF-8 replaced.

        Raises ValueError for an id outside [0, vocab_size).
        """
        parts: list[str] = []
        pending = bytearray()
        for raw in ids:
            token = self._check_id(raw)
            if token in SPECIAL_NAMES:
                continue
            if token < NUM_BYTE_IDS:
                pending.append(token - BYTE_OFFSET)
                continue
            parts.append(pending.decode("utf-8", errors="replace"))
            pending.clear()
            parts.append(f"<{token}>")
        parts.append(pending.decode("utf-8", errors="replace"))
        return "".join(parts)

    def token_text(self, id: int) -> str:  # noqa: A002  (name fixed by the public API)
        """Readable form of one id: `<bos>`/`<eos>`/`<pad>`, a printable char, `<0xNN>`, or `<id>`.

        Printable means printable ASCII (space included); other bytes, including the parts of a
        multi-byte UTF-8 character, show as `<0xNN>`. ValueError for an id outside [0, vocab_size).
        """
        token = self._check_id(id)
        if token in SPECIAL_NAMES:
            return SPECIAL_NAMES[token]
        if token >= NUM_BYTE_IDS:
            return f"<{token}>"
        byte = token - BYTE_OFFSET
        char = chr(byte)
        if byte < 0x80 and char.isprintable():
            return char
        return f"<0x{byte:02X}>"

    def _check_id(self, token: int) -> int:
        """`token` as an int, or ValueError when it is not an id of this vocabulary."""
        value = int(token)
        if value < 0 or value >= self._vocab_size:
            raise ValueError(f"token id must be in [0, {self._vocab_size}), got {value}")
        return value

    def __repr__(self) -> str:
        return f"ByteTokenizer(vocab_size={self._vocab_size})"
