"""A trained model as a Hugging Face checkpoint folder, with its training record.

The folder loads through `--checkpoint` exactly as a real GLM checkpoint: `config.json`,
`generation_config.json`, sharded bf16 safetensors with their index (the router and its
score-correction bias stay fp32, as transformers keeps them), the tokenizer files, and beside
them `training_record.json` and `training_loss.png` (ignored by loaders).
`check_windows` / `check_loss` define the held-out check a test recomputes on the CPU.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from glmcheck.model.build import FP32_PATTERNS
from glmcheck.training.evaluate import mean_loss
from glmcheck.training.stream import eval_windows
from glmcheck.training.tokenizer import BOS_ID, EOS_ID, PAD_ID, save_tokenizer

RECORD_FILE = "training_record.json"
PLOT_FILE = "training_loss.png"


def save_checkpoint(model: torch.nn.Module, tokenizer, directory: str | Path, *,
                    max_shard_size: str = "12MB") -> Path:
    """Write `model` in bf16 (fp32 routers) with `tokenizer` to `directory` (created); returns it.
    Casts `model` itself to bf16 (its fp32 routers keep their values)."""
    from transformers import GenerationConfig

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
        if tensor.is_floating_point() and not any(re.search(p, name) for p in FP32_PATTERNS):
            tensor.data = tensor.data.to(torch.bfloat16)
    model.config.use_cache = True
    model.config.dtype = torch.bfloat16
    model.save_pretrained(directory, max_shard_size=max_shard_size)
    GenerationConfig(bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID, do_sample=False,
                     max_new_tokens=64).save_pretrained(directory)
    # Leave layer_types to each transformers version's default: 5.24 writes "indexed_attention",
    # which 5.17 rejects; 5.17's own default is "deepseek_sparse_attention".
    config = json.loads((directory / "config.json").read_text())
    config.pop("layer_types", None)
    (directory / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    save_tokenizer(tokenizer, directory)
    return directory


def check_windows(tokenizer, heldout_docs, check_len: int, count: int) -> torch.Tensor:
    """The held-out check's windows: the first `count` windows of `check_len` of the held-out stream."""
    from glmcheck.training.stream import encode_stream

    return eval_windows(encode_stream(tokenizer, heldout_docs), seq_len=check_len, count=count)


def check_loss(checkpoint: str | Path, windows: torch.Tensor, device: torch.device | str = "cpu") -> float:
    """Mean held-out loss of the saved checkpoint, loaded as a user loads it, computed in fp32."""
    from glmcheck.model.checkpoint import load_checkpoint_model

    model = load_checkpoint_model(checkpoint, device=torch.device(device)).float()
    return mean_loss(model, windows)


def write_record(directory: str | Path, record: dict) -> None:
    directory = Path(directory)
    tmp = directory / (RECORD_FILE + ".tmp")
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    tmp.replace(directory / RECORD_FILE)


def read_record(directory: str | Path) -> dict:
    path = Path(directory) / RECORD_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{str(path)!r} does not exist")
    return json.loads(path.read_text())


def plot_losses(history: list[dict], evals: list[dict], dense_steps: int, path: str | Path, title: str) -> None:
    """Training LM loss (smoothed), indexer KL and held-out loss against the step; the stage boundary."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [row["step"] for row in history]
    fig, (ax, kl_ax) = plt.subplots(1, 2, figsize=(11, 4))
    lm = torch.tensor([row["lm_loss"] for row in history])
    window = max(1, len(lm) // 50)
    smooth = torch.nn.functional.avg_pool1d(lm[None, None], window, 1, padding=0)[0, 0] if len(lm) >= window else lm
    ax.plot(steps[:len(lm)], lm.tolist(), color="0.8", lw=0.6, label="train LM loss")
    ax.plot(steps[window - 1:window - 1 + len(smooth)], smooth.tolist(), color="C0", label=f"train (mean of {window})")
    ax.plot([e["step"] for e in evals], [e["heldout_loss"] for e in evals], "o-", color="C3", label="held-out loss")
    kl_ax.plot(steps, [row["indexer_kl"] for row in history], color="C2", lw=0.8)
    for axis in (ax, kl_ax):
        axis.axvline(dense_steps, color="k", ls="--", lw=0.8)
        axis.set_xlabel("step")
    ax.set_ylabel("nats / token")
    ax.legend()
    kl_ax.set_ylabel("indexer KL (mean over full layers)")
    kl_ax.set_yscale("log")
    fig.suptitle(f"{title} (dense warm-up | sparse)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
