"""A byte-level BPE tokenizer trained with the `tokenizers` library on the corpus's training split,
saved in the Hugging Face layout (`tokenizer.json` + `tokenizer_config.json`) so the checkpoint
loads through `AutoTokenizer.from_pretrained` like a real one.

Ids: 0 `<bos>`, 1 `<eos>`, 2 `<pad>` (the dummy presets' convention), then the 256 byte symbols
and the merges. Encoding with special tokens prepends `<bos>`; documents are joined with `<eos>`
by the training stream, not by the tokenizer.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from glmcheck.data.documents import Document

SPECIAL_TOKENS = ("<bos>", "<eos>", "<pad>")
BOS_ID, EOS_ID, PAD_ID = 0, 1, 2


def train_tokenizer(docs: Iterable[Document], vocab_size: int):
    """A `tokenizers.Tokenizer` (byte-level BPE, `vocab_size` ids in all) trained on `docs`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 259 + 1:
        raise ValueError(f"vocab_size must be an int > 259 (3 special ids + 256 bytes), got {vocab_size!r}")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator((d.text for d in docs), trainer=trainer)
    tokenizer.post_processor = processors.TemplateProcessing(single="<bos> $A", pair="<bos> $A <bos> $B",
                                                             special_tokens=[("<bos>", BOS_ID)])
    for token, expected in zip(SPECIAL_TOKENS, (BOS_ID, EOS_ID, PAD_ID)):
        if tokenizer.token_to_id(token) != expected:
            raise RuntimeError(f"special token {token} got id {tokenizer.token_to_id(token)}, expected {expected}")
    return tokenizer


def save_tokenizer(tokenizer, directory: str | Path) -> None:
    """Write `tokenizer.json`, `tokenizer_config.json` and `special_tokens_map.json` to `directory`."""
    from transformers import PreTrainedTokenizerFast

    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<bos>", eos_token="<eos>",
                                      pad_token="<pad>", clean_up_tokenization_spaces=False)
    wrapped.save_pretrained(str(directory))


def load_tokenizer(directory: str | Path):
    """The `tokenizers.Tokenizer` saved in `directory` (its tokenizer.json)."""
    from tokenizers import Tokenizer

    path = Path(directory) / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"{str(path)!r} does not exist")
    return Tokenizer.from_file(str(path))
