"""Token streams and the windows a training step or an evaluation reads from them.

A split's stream is every document encoded as `<bos> tokens <eos>`, concatenated in corpus order.
A training window is `seq_len + 1` tokens at an offset drawn from a generator seeded by
(seed, step), so a resumed run reads exactly the windows the uninterrupted one would; its first
token is set to `<bos>`, as every prompt a check sends starts with it. Evaluation windows are the
stream's first non-overlapping windows, the same for every evaluation of a run.
"""

from __future__ import annotations

import torch

from glmcheck.data.documents import Document
from glmcheck.training.tokenizer import BOS_ID, EOS_ID


def encode_stream(tokenizer, docs: list[Document]) -> torch.Tensor:
    """int32 [N]: every document as <bos> tokens <eos>, in order (tokenizer: a `tokenizers.Tokenizer`)."""
    encodings = tokenizer.encode_batch([d.text for d in docs], add_special_tokens=False)
    parts = []
    for enc in encodings:
        parts.append(torch.tensor([BOS_ID, *enc.ids, EOS_ID], dtype=torch.int32))
    if not parts:
        raise ValueError("no documents to encode")
    return torch.cat(parts)


def training_windows(stream: torch.Tensor, *, seq_len: int, batch: int, seed: int, step: int) -> torch.Tensor:
    """int64 [batch, seq_len + 1] windows of `stream` for `step` (deterministic in seed, step)."""
    if stream.numel() < seq_len + 2:
        raise ValueError(f"stream of {stream.numel()} tokens is shorter than one window of {seq_len + 1}")
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    starts = torch.randint(0, stream.numel() - seq_len - 1, (batch,), generator=generator)
    windows = torch.stack([stream[s:s + seq_len + 1] for s in starts.tolist()]).long()
    windows[:, 0] = BOS_ID
    return windows


def eval_windows(stream: torch.Tensor, *, seq_len: int, count: int) -> torch.Tensor:
    """int64 [n, seq_len + 1]: the first min(count, what fits) non-overlapping windows, <bos> first."""
    fits = (stream.numel() - 1) // seq_len
    n = min(count, fits)
    if n < 1:
        raise ValueError(f"stream of {stream.numel()} tokens holds no window of {seq_len + 1}")
    windows = torch.stack([stream[i * seq_len:i * seq_len + seq_len + 1] for i in range(n)]).long()
    windows[:, 0] = BOS_ID
    return windows
