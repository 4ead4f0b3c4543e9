"""Natural-text prompts from the held-out split of the trained models' corpus.

`glmcheck/data/resources/corpus/heldout.jsonl.gz` (package data) holds the documents no trained model
saw in training (Python standard-library sources and pydoc topics chosen by `glmcheck.training.corpus`, in the
format of `glmcheck.data.documents`). A model check
on a checkpoint (a trained model or a real GLM one) reads its prompts from there, encoded by the checkpoint's
own tokenizer: a trained model's distributions on seeded random ids say little. The
stream is every held-out document as `<bos> text <eos>`, in order; a prompt of N tokens is the
window at a seeded offset with `<bos>` first (the stream repeats when N is longer than it).
"""

from __future__ import annotations

from functools import lru_cache
from importlib.resources import files
from pathlib import Path

import torch

from glmcheck.data.documents import load_documents

HELDOUT_FILE = Path(str(files("glmcheck") / "data" / "resources" / "corpus" / "heldout.jsonl.gz"))  # package data


@lru_cache(maxsize=2)
def heldout_documents(path: str | None = None):
    """The held-out documents (`glmcheck.data.documents.Document`), cached."""
    file = Path(path) if path else HELDOUT_FILE
    if not file.is_file():
        raise FileNotFoundError(f"the held-out corpus {str(file)!r} does not exist (it ships in the glmcheck "
                                "package: data/resources/corpus/)")
    return tuple(load_documents(file))


def heldout_stream(tokenizer) -> list[int]:
    """Token ids of every held-out document as <bos> text <eos> (tokenizer: `encode(text, add_bos)`
    and `bos_id` / `eos_id`, either None when the tokenizer has none)."""
    bos, eos = getattr(tokenizer, "bos_id", None), getattr(tokenizer, "eos_id", None)
    ids: list[int] = []
    for doc in heldout_documents():
        ids += ([bos] if bos is not None else []) + tokenizer.encode(doc.text, add_bos=False) \
            + ([eos] if eos is not None else [])
    return ids


def natural_prompt(tokenizer, tokens: int, seed: int, device: torch.device | str = "cpu",
                   stream: list[int] | None = None) -> torch.Tensor:
    """[1, tokens] int64: the held-out stream's window at an offset drawn by `seed`, <bos> first
    (when the tokenizer has one)."""
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise ValueError(f"tokens must be a positive int, got {tokens!r}")
    ids = stream if stream is not None else heldout_stream(tokenizer)
    if tokens > len(ids):
        ids = ids * (tokens // len(ids) + 1)
    generator = torch.Generator().manual_seed(seed)
    start = int(torch.randint(0, len(ids) - tokens + 1, (1,), generator=generator))
    window = torch.tensor([ids[start:start + tokens]], dtype=torch.long)
    if getattr(tokenizer, "bos_id", None) is not None:
        window[0, 0] = tokenizer.bos_id
    return window.to(device)


def heldout_prompt_records(count: int = 50, seed: int = 2026) -> list[dict[str, str]]:
    """The `heldout50` prompt set: text of the held-out documents (code and prose as they come)
    cut at a word boundary inside a line, with the 4 lines before it as context. Prompt k takes
    document k mod D (D documents, corpus order), a non-blank line and a cut drawn by `seed`."""
    import random

    rng = random.Random(seed)
    docs = heldout_documents()
    records = []
    for k in range(count):
        doc = docs[k % len(docs)]
        lines = doc.text.split("\n")
        usable = [i for i, line in enumerate(lines) if len(line.split()) >= 3]
        i = usable[rng.randrange(len(usable))]
        words = lines[i].split(" ")
        first = next(j for j, w in enumerate(words) if w)  # keep the indentation
        cut = " ".join(words[:rng.randrange(first + 1, len(words))]).rstrip()
        context = "\n".join(lines[max(0, i - 4):i])
        records.append({"id": f"heldout-{k + 1:02d}", "prompt": (context + "\n" + cut).lstrip("\n"),
                        "category": doc.name})
    return records
