"""One call that trains ref-cpu or ref-gpu (the trained models) end to end; its CLI is
`scripts/train_reference_model.py`.

corpus (this Python's standard library, or a saved corpus file) -> held-out split -> BPE tokenizer
on the training split -> `Trainer` (dense warm-up, sparse stage; resumable) -> Hugging Face
checkpoint in `<out>/checkpoint` with `training_record.json` and `training_loss.png`, and the
held-out documents in `<out>/heldout.jsonl.gz` (the fixture's check and the tasks read them).
"""

from __future__ import annotations

import dataclasses
import platform
import time
from pathlib import Path

import torch

from glmcheck.data.documents import load_documents, save_documents
from glmcheck.training import corpus as corpus_lib
from glmcheck.training.export import check_loss, check_windows, plot_losses, save_checkpoint, write_record
from glmcheck.training.geometry import trained_geometry
from glmcheck.training.loop import Trainer
from glmcheck.training.stream import encode_stream
from glmcheck.training.tokenizer import train_tokenizer

HELDOUT_FILE = "heldout.jsonl.gz"


def train_model(name: str, out: str | Path, *, corpus: str | Path | None = None,
                device: torch.device | str | None = None, seed: int = 0,
                steps: tuple[int, int] | None = None, micro_batch: int | None = None,
                overrides: dict | None = None, resume: bool = True, quiet: bool = False) -> dict:
    """Train the trained model `name` (`glmcheck.training.geometry`) into `out`; returns its record.
    `steps` = (dense, sparse) overrides the recipe's stage lengths; `overrides` any other `Recipe`
    field (short runs, tests); the record holds the recipe that ran."""
    started = time.perf_counter()
    geometry = trained_geometry(name)
    recipe = geometry.recipe
    if steps is not None:
        dense, sparse = steps
        if dense < 0 or sparse < 0 or dense + sparse < 1:
            raise ValueError(f"steps must be (dense >= 0, sparse >= 0) with at least one step, got {steps}")
        recipe = dataclasses.replace(recipe, dense_steps=dense, sparse_steps=sparse,
                                     warmup_steps=min(recipe.warmup_steps, max(1, (dense + sparse) // 10)))
    if overrides:
        unknown = set(overrides) - {f.name for f in dataclasses.fields(recipe)}
        if unknown:
            raise ValueError(f"overrides names no recipe field: {', '.join(sorted(unknown))}")
        recipe = dataclasses.replace(recipe, **overrides)
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    out = Path(out)
    docs = load_documents(corpus) if corpus else corpus_lib.stdlib_documents()
    train_docs, heldout_docs = corpus_lib.split(docs)
    corpus_info = corpus_lib.describe(docs)
    if corpus:
        corpus_info["source"] = f"corpus file {Path(corpus).name}"
    corpus_info["names"] = [d.name for d in docs]
    tokenizer = train_tokenizer(train_docs, geometry.vocab_size)
    train_stream = encode_stream(tokenizer, train_docs)
    heldout_stream = encode_stream(tokenizer, heldout_docs)
    trainer = Trainer(geometry, recipe, train_stream=train_stream, heldout_stream=heldout_stream,
                      vocab_size=tokenizer.get_vocab_size(), run_dir=out, device=device, seed=seed,
                      fingerprint={"corpus_sha256": corpus_info["sha256"]}, micro_batch=micro_batch, quiet=quiet)
    resumed = resume and trainer.load()
    state = trainer.run()
    checkpoint = save_checkpoint(trainer.model, tokenizer, out / "checkpoint")
    save_documents(heldout_docs, out / HELDOUT_FILE)
    windows = check_windows(tokenizer, heldout_docs, recipe.check_len, recipe.check_windows)
    check = {"len": recipe.check_len, "windows": int(windows.shape[0]), "dtype": "float32",
             "loss": check_loss(checkpoint, windows, device)}
    record = {
        "reference_model": name,  # the field name of the shipped training records (data/resources/trained_models/)
        "description": geometry.description, "seed": seed, "device": _device_name(device),
        "recipe": dataclasses.asdict(recipe), "corpus": corpus_info,
        "tokenizer": {"kind": "byte-level BPE (tokenizers)", "vocab_size": tokenizer.get_vocab_size(),
                      "train_tokens": int(train_stream.numel()), "heldout_tokens": int(heldout_stream.numel())},
        "parameters": sum(p.numel() for p in trainer.model.parameters()),
        "final_heldout_loss": state.evals[-1]["heldout_loss"] if state.evals else None,
        "evals": state.evals, "recall": state.recall, "check": check, "resumed": bool(resumed),
        "train_wall_s": state.wall_s, "total_wall_s": time.perf_counter() - started,
        "tokens_seen": state.history[-1]["tokens"] if state.history else 0,
        "history": [{k: (round(v, 5) if isinstance(v, float) else v) for k, v in row.items()}
                    for row in state.history],
        "versions": _versions(),
    }
    write_record(checkpoint, record)
    plot_losses(state.history, state.evals, recipe.dense_steps, checkpoint / "training_loss.png",
                f"{name}: {record['parameters'] / 1e6:.1f} M parameters, {recipe.seq_len} tokens")
    return record


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.processor() or platform.machine()})"


def _versions() -> dict:
    import tokenizers
    import transformers

    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "tokenizers": tokenizers.__version__}
