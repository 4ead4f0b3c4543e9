"""Options and plumbing shared by the model checks (layer0, logits, firsttoken, drift): their
options, their preparation (`Prepared`) and the one sequence they all run (`run_check`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from glmcheck.backends import flashmla_available
from glmcheck.backends.flashmla import flashmla_supports
from glmcheck.backends.registry import backend_identity
from glmcheck.backends.validation import resolve_backend_names, validate_backends
from glmcheck.checks.band import Gate, band_names, exit_code
from glmcheck.checks.runner import SwapOptions
from glmcheck.commands.model_options import PRESET_HELP, add_model_options, check_model_usage  # noqa: F401
from glmcheck.commands.options import check_band, check_count
from glmcheck.kernels.union import legal_groups
from glmcheck.model.checkpoint import check_tensors
from glmcheck.model.load import ModelSpec, config_of, load_model, resolve_device
from glmcheck.model.plan import check_fits
from glmcheck.records.environment import code_identity, config_hash, environment_metadata
from glmcheck.records.layout import clear_record
from glmcheck.records.progress import ItemStore
from glmcheck.records.report import render
from glmcheck.records.store import default_run_dir, write_record


def _flashmla_here(device: torch.device, latent_dims: tuple[int, int] | None) -> bool:
    return (device.type == "cuda" and torch.cuda.get_device_capability(device)[0] == 9
            and flashmla_supports(latent_dims) and flashmla_available()[0])


def default_backends(device: torch.device, heads_per_rank: int,
                     latent_dims: tuple[int, int] | None = None) -> list[str]:
    """The kernels under test and the independent cross-checks that can run here for this head count
    (and latent geometry, when given). The naive `torch_bf16` baseline is left to `--backends`: its
    bf16 scores put it outside the band at GLM-5.2 scale (1.09e-2 on the H200), so in the default set
    it would fail every default run for a reason that is not the kernel's."""
    names = ["triton_sparse_mla"]
    names += [f"triton_sparse_mla:union{g}" for g in legal_groups(heads_per_rank)]
    names += ["hf_sdpa"]
    if _flashmla_here(device, latent_dims):
        names.append("flashmla_sparse")
    return names


def default_baseline(device: torch.device, latent_dims: tuple[int, int] | None = None) -> str | None:
    return "flashmla_sparse" if _flashmla_here(device, latent_dims) else None


EXACT = {"fp32": "reference", "fp64": "reference:fp64"}


class Prepared:
    """Resolved options: spec, device, backends, reference, swap options, gate, warnings."""

    def __init__(self, ns: argparse.Namespace, *, layer0_only: bool = False, resumable: bool = False):
        from glmcheck.model import distributed

        check_model_usage(ns, resumable=resumable)
        check_band(ns.band)
        self.spec = ModelSpec(preset=ns.model, checkpoint=ns.checkpoint, layers=ns.layers, experts=ns.experts,
                              seed=ns.seed, init=ns.init)
        self.config = config_of(self.spec, layer0_only=layer0_only)
        if self.spec.checkpoint:  # its tensors against its config.json, before any warning is printed
            check_tensors(self.spec.checkpoint, warn=False)
        self.dist = distributed.current()
        self.device = self.dist.device if self.dist else resolve_device(ns.device)
        heads = self.config.num_attention_heads
        if isinstance(ns.tp, bool) or ns.tp < 1 or heads % ns.tp:
            raise ValueError(f"--tp must divide the {heads} attention heads, got {ns.tp}")
        dims = (self.config.kv_lora_rank, self.config.qk_rope_head_dim)
        self.exact, self.band_size = EXACT[ns.exact], ns.band
        self.backends = resolve_backend_names([b.strip() for b in ns.backends.split(",") if b.strip()]
                                              if ns.backends else default_backends(self.device, heads // ns.tp, dims))
        band = band_names(self.band_size)
        under_test = [b for b in self.backends if b != self.exact and b not in band and not b.startswith("hf_")]
        if not under_test:
            raise ValueError(f"--backends names no backend under test (got {', '.join(self.backends)}; the exact "
                             f"reference, the band's band:0..{self.band_size - 1} and hf_* cross-checks are not "
                             f"judged)")
        baseline = default_baseline(self.device, dims) if ns.baseline is None else ns.baseline
        self.baseline = None if baseline in (None, "", "none") else resolve_backend_names([baseline])[0]
        if self.baseline is not None and self.baseline not in self.backends:
            self.backends.append(self.baseline)
        self.warnings = validate_backends([self.exact] + self.backends, device=self.device, heads=heads,
                                          tp=ns.tp, deterministic=ns.deterministic, latent_dims=dims)
        # Under torchrun each rank holds H/tp heads and calls the kernel once per layer itself.
        self.options = SwapOptions(tp=1 if self.dist else ns.tp,
                                   kv_cache_dtype=None if ns.kv_cache_dtype == "bf16" else ns.kv_cache_dtype,
                                   dense_threshold=getattr(ns, "dense_threshold", None),
                                   deterministic=ns.deterministic)
        self.gate = Gate(ratio=ns.gate_ratio, cap=ns.max_rel_l2)
        self.tp = ns.tp
        self.is_main = self.dist is None or self.dist.is_main
        self.quiet = ns.quiet or not self.is_main

    def describe(self) -> dict:
        return {"tp": self.tp, "torchrun_ranks": self.dist.world_size if self.dist else None,
                "backends": self.backends, "exact": self.exact, "baseline": self.baseline, "band": self.band_size,
                "kv_cache_dtype": self.options.kv_cache_dtype, "dense_threshold": self.options.dense_threshold,
                "deterministic": self.options.deterministic, "gate_ratio": self.gate.ratio,
                "max_rel_l2": self.gate.cap, "device": str(self.device)}

    def fingerprint(self, command: str, **items) -> dict:
        """Everything that decides a resumable run's results: command, model and its config hash,
        options, the items requested and the code (glmcheck's sources, each backend's module)."""
        return {"command": command, "model": self.spec.describe(), "config_hash": config_hash(self.config),
                "options": self.describe(), "code": {**code_identity(), "backends": {
                    name: backend_identity(name) for name in [self.exact] + self.backends}}, **items}

    def prompt_tokens(self, requested: int | None) -> int:
        """--tokens, or 4096 on a GPU and 128 on the CPU; ValueError unless positive, within the
        model's positions and within the device's memory (`check_prompt`)."""
        tokens = requested if requested is not None else (4096 if self.device.type == "cuda" else 128)
        self.check_prompt(tokens)
        return tokens

    def check_prompt(self, tokens: int, option: str = "--tokens") -> None:
        """ValueError naming `option` unless a prompt of `tokens` tokens fits the model and device."""
        check_count(tokens, option)
        limit = getattr(self.config, "max_position_embeddings", None)
        if limit is not None and tokens > limit:
            raise ValueError(f"{option} {tokens}: more than the model's {limit} positions")
        check_fits(self.config, tokens, self.device, option)

    def forward_count(self) -> int:
        """Forwards of a layer0/drift run: the exact reference twice, the band, every other backend once."""
        band = band_names(self.band_size)
        return 2 + self.band_size + len([b for b in dict.fromkeys(self.backends) if b != self.exact and b not in band])

    def say_warnings(self) -> None:
        if not self.is_main:
            return
        for warning in self.warnings:
            print(f"warning: {warning}", file=sys.stderr)


def run_directory(ns: argparse.Namespace, prep: Prepared, command: str) -> Path | None:
    """--out, or a fresh runs/<command>-<timestamp> on rank 0; None on other ranks without --out."""
    if ns.out:
        return Path(ns.out)
    return default_run_dir(command) if prep.is_main else None


class Resume:
    """The finished items of a resumable run: with --out, read and checked (fingerprint, item files)
    while the options are checked, before any model is built; without it, or with --overwrite, a
    fresh store, bound once the run has its record directory (`bind`: --overwrite removes the record
    that was there first). `total` items of kind `what` are requested; a resumed run says so."""

    def __init__(self, ns: argparse.Namespace, prep: Prepared, fingerprint: dict, *, total: int | None = None,
                 what: str = "items"):
        self.fingerprint, self.writable = fingerprint, prep.is_main
        self.overwrite = bool(getattr(ns, "overwrite", False))
        self.total, self.what = total, what
        self.store = None
        if ns.out and not self.overwrite:
            self.store = ItemStore(Path(ns.out), fingerprint, writable=self.writable)
        self.done = self.store.load() if self.store is not None else {}

    def bind(self, out: Path | None) -> None:
        if self.store is None:
            if self.overwrite and self.writable and out is not None:
                clear_record(out)
            self.store = ItemStore(out, self.fingerprint, writable=self.writable)
        if self.done and self.writable:
            of, left = ("", "") if self.total is None else (f" of {self.total}",
                                                            f"; {self.total - len(self.done)} left to compute")
            print(f"resuming {out}: {len(self.done)}{of} {self.what} finished there earlier are kept{left} "
                  f"(--overwrite starts afresh)", file=sys.stderr)

    def save(self, key: str, payload) -> None:
        self.store.save(key, payload)


@dataclass
class CheckOutcome:
    """What one check run produced: its record rows, verdict, facts, extra summary fields, tensors."""

    rows: list[dict]
    verdict: str
    facts: dict
    extra: dict | None = None
    tensors: dict | None = None


def run_check(ns: argparse.Namespace, command: str,
              plan: Callable[[Prepared], Callable[[torch.nn.Module, Path | None], CheckOutcome]], *,
              layer0_only: bool = False, resumable: bool = False) -> int:
    """The one sequence of every model check: resolve and check the shared options (`Prepared`),
    let `plan` check the command's own options and return its run, print the warnings, build the
    model, run it, write the record and print the tables. Nothing is written before the model is
    built. `resumable` commands get their record directory before the run (their finished items
    live there); the others get it when the record is written. Returns 0 PASS, 1 FAIL, 3 INCONCLUSIVE
    (a band that cannot judge: `glmcheck.checks.band`); bad input raises (exit 2)."""
    prep = Prepared(ns, layer0_only=layer0_only, resumable=resumable)
    run = plan(prep)
    prep.say_warnings()
    model = load_model(prep.spec, prep.device, layer0_only=layer0_only)
    out = run_directory(ns, prep, command) if resumable else None
    outcome = run(model, out)
    return finish(command, ns, prep, model, outcome, out)


def finish(command: str, ns: argparse.Namespace, prep: Prepared, model, outcome: CheckOutcome,
           out: Path | None = None) -> int:
    """Write the record, print the tables, return the exit code (0 PASS, 1 FAIL, 3 INCONCLUSIVE); rank 0 only."""
    code = exit_code(outcome.verdict)
    if not prep.is_main:
        return code
    rows = outcome.rows
    summary = {"command": command, "argv": sys.argv, "environment": environment_metadata(),
               "model": {**prep.spec.describe(), "config_hash": config_hash(model.config),
                         "layers_built": model.config.num_hidden_layers},
               "options": prep.describe(), "warnings": prep.warnings, "facts": outcome.facts, "rows": rows,
               "verdict": outcome.verdict, **(outcome.extra or {})}
    directory = out or run_directory(ns, prep, command)
    if out is None and getattr(ns, "overwrite", False):  # a resumable run's record was cleared when bound
        clear_record(directory)
    write_record(directory, summary, pd.DataFrame(rows), outcome.tensors if ns.save_tensors else None)
    print(render(summary, pd.DataFrame(rows)))
    print(f"record: {directory}")
    return code
