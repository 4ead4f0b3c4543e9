"""The training loop of a trained model (ref-cpu, ref-gpu): dense warm-up, then sparse training (DSA's two stages).

Stage `dense` (`recipe.dense_steps`): every indexer selects its whole causal prefix, the model
learns language on dense attention and the indexer learns, by its KL term, to match the main
attention (`glmcheck.training.indexer_loss`). Stage `sparse` (`recipe.sparse_steps`): the
indexer's top-k decides what the main attention sees; the LM loss trains the model through that
selection and the KL term (over the selected set) keeps the indexer on the attention's mass.
At the end of each stage the indexer's recall of the dense attention mass is measured on the
held-out split. Held-out loss is evaluated every `recipe.eval_every` steps.

fp32 master weights, AdamW, linear warm-up then cosine decay to 10 %, gradient clipping at 1;
bf16 autocast on CUDA. Resumable: `train-state.pt` in the run folder holds the model, optimiser,
step and history (written atomically at every evaluation); a resumed run reads the same windows
(`glmcheck.training.stream`) and must have the same fingerprint (geometry, recipe, seed, corpus).
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm

from glmcheck.training.balance import RouterLoad
from glmcheck.training.evaluate import indexer_recall, mean_loss
from glmcheck.training.geometry import Recipe, TrainedGeometry
from glmcheck.training.indexer_loss import IndexerProbe, dense_selection
from glmcheck.training.stream import eval_windows, training_windows

STATE_FILE = "train-state.pt"


@dataclass
class TrainState:
    """What a resumed run continues from (everything but the tensors lives in `history`)."""

    step: int = 0
    history: list[dict] = field(default_factory=list)  # one row per step
    evals: list[dict] = field(default_factory=list)  # held-out loss rows
    recall: dict = field(default_factory=dict)  # stage -> per-layer recall rows
    wall_s: float = 0.0


def build_model(geometry: TrainedGeometry, vocab_size: int, seed: int, device: torch.device):
    """A freshly initialised fp32 GlmMoeDsaForCausalLM (transformers' init, seeded) with eager attention."""
    from transformers import GlmMoeDsaForCausalLM

    config = geometry.config(vocab_size)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    with torch.device(device):
        model = GlmMoeDsaForCausalLM(config)
    return model.float().train()


def _optimizer(model: torch.nn.Module, recipe: Recipe) -> torch.optim.Optimizer:
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "gate.weight" not in n]
    other = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "gate.weight" not in n)]
    return torch.optim.AdamW([{"params": decay, "weight_decay": recipe.weight_decay},
                              {"params": other, "weight_decay": 0.0}], lr=recipe.lr, betas=(0.9, 0.95), eps=1e-8)


def learning_rate(recipe: Recipe, step: int) -> float:
    """Linear warm-up over `warmup_steps`, then cosine from `lr` to `lr / 10` at the last step."""
    total = recipe.dense_steps + recipe.sparse_steps
    if step < recipe.warmup_steps:
        return recipe.lr * (step + 1) / recipe.warmup_steps
    progress = (step - recipe.warmup_steps) / max(1, total - recipe.warmup_steps)
    return recipe.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def stage_of(recipe: Recipe, step: int) -> str:
    return "dense" if step < recipe.dense_steps else "sparse"


class Trainer:
    """One trained model's training run in `run_dir` (see the module docstring)."""

    def __init__(self, geometry: TrainedGeometry, recipe: Recipe, *, train_stream: torch.Tensor,
                 heldout_stream: torch.Tensor, vocab_size: int, run_dir: Path, device: torch.device,
                 seed: int = 0, fingerprint: dict | None = None, micro_batch: int | None = None,
                 quiet: bool = False):
        self.geometry, self.recipe, self.device, self.seed = geometry, recipe, device, seed
        self.train_stream, self.run_dir, self.quiet = train_stream, Path(run_dir), quiet
        # micro_batch: sequences of seq_len per forward; the dense stage holds as many tokens per forward
        self.micro_tokens = (micro_batch or recipe.micro_batch or recipe.batch) * recipe.seq_len
        self.fingerprint = dict(fingerprint or {}, recipe=asdict(recipe), geometry=geometry.name, seed=seed)
        self.eval_sets = {stage: eval_windows(heldout_stream, seq_len=recipe.shape(stage)[0],
                                              count=recipe.eval_windows) for stage in ("dense", "sparse")}
        self.model = build_model(geometry, vocab_size, seed, device)
        self.optimizer = _optimizer(self.model, recipe)
        self.state = TrainState()
        self.autocast = device.type == "cuda"

    # ---- persistence -------------------------------------------------------------------------
    def load(self) -> bool:
        """Continue from `train-state.pt` when present; ValueError when it is another run's."""
        path = self.run_dir / STATE_FILE
        if not path.is_file():
            return False
        saved = torch.load(path, map_location=self.device, weights_only=False)
        if saved.get("fingerprint") != self.fingerprint:
            raise ValueError(f"{path} belongs to another training run (geometry, recipe, seed or corpus differ); "
                             "use another --out or delete it")
        self.model.load_state_dict(saved["model"])
        self.optimizer.load_state_dict(saved["optimizer"])
        self.state = TrainState(**saved["state"])
        return True

    def save(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        path, tmp = self.run_dir / STATE_FILE, self.run_dir / (STATE_FILE + ".tmp")
        torch.save({"fingerprint": self.fingerprint, "model": self.model.state_dict(),
                    "optimizer": self.optimizer.state_dict(), "state": asdict(self.state)}, tmp)
        tmp.replace(path)

    # ---- one step ----------------------------------------------------------------------------
    def _step(self, step: int, probe: IndexerProbe, load: RouterLoad) -> dict:
        recipe, stage = self.recipe, stage_of(self.recipe, step)
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate(recipe, step)
        seq_len, batch = recipe.shape(stage)
        windows = training_windows(self.train_stream, seq_len=seq_len, batch=batch, seed=self.seed, step=step)
        lm_total = kl_total = 0.0
        micro = self.micro_batch(stage)
        parts = batch // micro
        for part in range(parts):
            chunk = windows[part * micro:(part + 1) * micro].to(self.device)
            probe.clear()
            with (dense_selection(self.model) if stage == "dense" else contextlib.nullcontext()), \
                    torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast):
                logits = self.model(input_ids=chunk[:, :-1]).logits
                lm = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), chunk[:, 1:].flatten())
                kl = sum(probe.loss(g, sparse=stage == "sparse", stride=recipe.kl_query_stride, offset=step + part)
                         for g in probe.groups)
            ((lm + kl) / parts).backward()
            lm_total += lm.item() / parts
            kl_total += float(kl.detach()) / parts
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0).item()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        imbalance = load.update(recipe.balance_rate)
        return {"step": step, "stage": stage, "lm_loss": lm_total, "indexer_kl": kl_total / len(probe.groups),
                "lr": self.optimizer.param_groups[0]["lr"], "grad_norm": grad_norm, "expert_imbalance": imbalance,
                "tokens": recipe.tokens_after(step + 1)}

    def micro_batch(self, stage: str) -> int:
        """Sequences per forward in `stage`: at most `micro_tokens` tokens, dividing the step's batch."""
        seq_len, batch = self.recipe.shape(stage)
        micro = max(1, min(batch, self.micro_tokens // seq_len))
        while batch % micro:
            micro -= 1
        return micro

    def evaluate(self, step: int, stage: str) -> dict:
        self.model.eval()
        mode = dense_selection(self.model) if stage == "dense" else contextlib.nullcontext()
        with mode:
            loss = mean_loss(self.model, self.eval_sets[stage], micro_batch=self.micro_batch(stage),
                             autocast=self.autocast)
        self.model.train()
        row = {"step": step, "stage": stage, "seq_len": self.recipe.shape(stage)[0], "heldout_loss": loss}
        self.state.evals.append(row)
        return row

    def measure_recall(self, stage: str) -> list[dict]:
        self.model.eval()
        rows = indexer_recall(self.model, self.eval_sets["sparse"], micro_batch=self.micro_batch("sparse"),
                              autocast=self.autocast)
        self.model.train()
        self.state.recall[stage] = rows
        return rows

    # ---- the run -----------------------------------------------------------------------------
    def run(self) -> TrainState:
        recipe = self.recipe
        total = recipe.dense_steps + recipe.sparse_steps
        probe, load = IndexerProbe(self.model), RouterLoad(self.model)
        bar = tqdm(total=total, initial=self.state.step, desc=f"train {self.geometry.name}", unit="step",
                   disable=self.quiet, dynamic_ncols=True)
        started = time.perf_counter() - self.state.wall_s
        try:
            for step in range(self.state.step, total):
                row = self._step(step, probe, load)
                row["wall_s"] = time.perf_counter() - started
                self.state.history.append(row)
                self.state.step = step + 1
                bar.update(1)
                bar.set_postfix(stage=row["stage"], lm=f"{row['lm_loss']:.3f}", kl=f"{row['indexer_kl']:.3f}")
                last_of_stage = step + 1 in (recipe.dense_steps, total)
                if (step + 1) % recipe.eval_every == 0 or last_of_stage:
                    probe.clear()
                    with probe.paused(), load.paused():
                        self.evaluate(step + 1, row["stage"])
                        if last_of_stage and row["stage"] not in self.state.recall:
                            self.measure_recall(row["stage"])
                    self.state.wall_s = time.perf_counter() - started
                    self.save()
                    if self.quiet:  # a line per evaluation stands in for the bar in logs
                        print(f"{self.geometry.name} step {step + 1}/{total} {row['stage']}: lm {row['lm_loss']:.4f} "
                              f"kl {row['indexer_kl']:.4f} held-out {self.state.evals[-1]['heldout_loss']:.4f} "
                              f"{row['tokens'] / self.state.wall_s:,.0f} tokens/s", flush=True)
        finally:
            bar.close()
            probe.remove()
            load.remove()
        self.state.wall_s = time.perf_counter() - started
        return self.state


