"""A model check's resolved setup: the model spec and its config, the device, the backends (the
default set, the exact reference, the baseline), the swap options and the gate, checked before any
model is built; and the finished items of a resumable run (`ResumeStore`)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from glmcheck.backends.choice import choose_backends
from glmcheck.backends.forms import using
from glmcheck.backends.names import band_names
from glmcheck.backends.registry import backend_identity
from glmcheck.checks.band import DEFAULT_BAND, Gate
from glmcheck.checks.runner import SwapOptions
from glmcheck.evaluate.arguments import check_band, check_count
from glmcheck.evaluate.options import EXACT, GPU_TOKENS, CheckOptions
from glmcheck.model.engine_calls import EngineCalls
from glmcheck.model.engine_pool import serving_pool
from glmcheck.model.engine_shape import engine_shape
from glmcheck.model.load import ModelSpec, resolve_model
from glmcheck.model.memory import check_fits, fits_device
from glmcheck.process.phases import CLOCK
from glmcheck.process.wording import flag
from glmcheck.records.environment import code_identity, config_hash
from glmcheck.records.layout import clear_record
from glmcheck.records.progress import ItemStore

if TYPE_CHECKING:
    from glmcheck.evaluate.report import Report


def in_forms(check: Callable[..., Report]) -> Callable[..., Report]:
    """`check(options, ...)` run with the band's and the fp32 reference's forms its `CheckOptions` name
    (`glmcheck.backends.forms.using`): every forward, compile ahead and diagnosis of the check runs them."""

    @functools.wraps(check)
    def run(options: CheckOptions, *args, **kwargs) -> Report:
        if not isinstance(options, CheckOptions):
            raise TypeError(f"options must be a CheckOptions, got {type(options).__name__}")
        with using(options.forms()):
            return check(options, *args, **kwargs)

    return run


class Setup:
    """Resolved options of one model check: spec, config, device, backends, exact reference, band,
    baseline, swap options, gate and the warnings to print. Raises ValueError (naming the flag) for
    options that cannot run here."""

    def __init__(self, options: CheckOptions, *, layer0_only: bool = False, one_prompt: bool = False,
                 tokens: int | None = None):
        """A check of `one_prompt` (layer0, drift) has its length resolved here: `tokens`, or 4096 on a GPU and
        128 on the CPU, checked against the model's positions and the device's memory (`self.tokens`)."""
        with CLOCK.phase("setup"):
            self._resolve(options, layer0_only, one_prompt, tokens)

    def _resolve(self, options: CheckOptions, layer0_only: bool, one_prompt: bool, tokens: int | None) -> None:
        from glmcheck.model import distributed

        options.check()
        band = DEFAULT_BAND if options.band is None else options.band
        check_band(band)
        self.band_size, self.band = band, band_names(band)
        self.spec = ModelSpec(preset=options.model, checkpoint=options.checkpoint, layers=options.layers,
                              experts=options.experts, seed=options.seed, init=options.init,
                              weights="fp8" if options.weights == "fp8" else "bf16")
        self.dist = distributed.current()
        self.config, self.device = resolve_model(self.spec, self.dist.device if self.dist else options.device,
                                                 layer0_only=layer0_only)
        heads, tp = self.config.num_attention_heads, options.tp
        if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1 or heads % tp:
            raise ValueError(f"{flag('tp')} must divide the {heads} attention heads, got {tp}")
        self._resolve_weights(options, tp)
        self.exact = EXACT[options.exact]
        choice = choose_backends(options.backend_list(), device=self.device, heads=heads, tp=tp,
                                 latent_dims=(self.config.kv_lora_rank, self.config.qk_rope_head_dim),
                                 band_size=self.band_size, exact=self.exact, baseline=options.baseline,
                                 deterministic=options.deterministic,
                                 kv_cache_dtype=None if options.kv_cache_dtype == "bf16" else options.kv_cache_dtype)
        self.backends, self.baseline, self.warnings = choice.backends, choice.baseline, choice.warnings
        # Under torchrun (and in a rehearsal) each rank holds H/tp heads and calls the kernel once per layer itself.
        shape = engine_shape(options.calls, options.chunk, options.pool_rows, options.requests, options.seed)
        self.options = SwapOptions(tp=1 if self.dist or self.rehearse else tp,
                                   kv_cache_dtype=None if options.kv_cache_dtype == "bf16" else options.kv_cache_dtype,
                                   dense_threshold=options.dense_threshold, deterministic=options.deterministic,
                                   engine=EngineCalls(shape) if shape is not None else None)
        self.gate = Gate(ratio=options.gate_ratio, cap=options.max_rel_l2)
        self.tp = tp
        self.forms = options.forms()
        CLOCK.note("forms", f"band {self.forms.band_on(self.device.type)}, fp32 reference {self.forms.reference}")
        self.is_main = self.dist is None or self.dist.is_main
        self.quiet = options.quiet or not self.is_main
        # Forwards of one prompt: the exact reference twice, the band, every other backend once.
        self.forwards = 2 + self.band_size + len([b for b in dict.fromkeys(self.backends)
                                                  if b != self.exact and b not in self.band])
        self.tokens = None
        if one_prompt:
            self.tokens = tokens if tokens is not None else (GPU_TOKENS if self.device.type == "cuda" else 128)
            self.check_prompt(self.tokens)
            self.check_cpu_time([self.tokens])

    def _resolve_weights(self, options: CheckOptions, tp: int) -> None:
        """--weights and --rehearse-rank against the model: `self.rehearse` (rank, tp) or None, `self.shard_tp` (the
        TP degree of the shard this process holds), the format checked for fitting until `check_prompt` resolves
        "auto" (`spec.weights`)."""
        from glmcheck.model.checkpoint_files import is_fp8

        self.rehearse = None
        if options.rehearse_rank is not None:
            if self.dist:
                raise ValueError("--rehearse-rank builds one rank's shard alone in one process; under torchrun every "
                                 "rank runs for real (leave --rehearse-rank out, or run it without torchrun)")
            self.rehearse = (options.rehearse_rank, tp)
        self.shard_tp = self.dist.world_size if self.dist else tp if self.rehearse else 1
        self.weights_requested = options.weights
        self.fp8_checkpoint = bool(self.spec.checkpoint) and is_fp8(self.config)
        if options.weights == "fp8" and self.spec.checkpoint and not self.fp8_checkpoint:
            raise ValueError(f"--weights fp8: checkpoint {self.spec.checkpoint} holds bf16 weights (no fp8 "
                             f"quantization_config), there are no FP8 codes to keep resident; use --weights bf16 "
                             f"(presets are quantised; a checkpoint is never changed)")
        self.longest = 0

    def _fit_weights(self) -> str:
        """The format a prompt is checked to fit in: fp8 where it may be held so (asked; auto on an FP8 checkpoint)."""
        auto_fp8 = self.weights_requested == "auto" and self.fp8_checkpoint
        return "fp8" if self.weights_requested == "fp8" or auto_fp8 else "bf16"

    def describe(self) -> dict:
        return {"tp": self.tp, "torchrun_ranks": self.dist.world_size if self.dist else None,
                "weights": self.weights_requested, "rehearse_rank": self.rehearse[0] if self.rehearse else None,
                "backends": self.backends, "exact": self.exact, "baseline": self.baseline, "band": self.band_size,
                "kv_cache_dtype": self.options.kv_cache_dtype, "dense_threshold": self.options.dense_threshold,
                "deterministic": self.options.deterministic, **self.forms.record(self.device.type),
                "gate_ratio": self.gate.ratio,
                "max_rel_l2": self.gate.cap, "device": str(self.device),
                **({"calls": self.options.engine.shape.describe()} if self.options.engine else {})}

    def fingerprint(self, command: str, **items) -> dict:
        """Everything that decides a resumable run's results: command, model and its config hash,
        options, the items requested and the code (glmcheck's sources, each backend's module)."""
        return {"command": command, "model": self.spec.describe(), "config_hash": config_hash(self.config),
                "options": self.describe(), "code": {**code_identity(), "backends": {
                    name: backend_identity(name) for name in [self.exact] + self.backends}}, **items}

    def check_prompt(self, tokens: int, option: str | None = None) -> None:
        """ValueError naming `option` (default the argument `tokens`) unless a prompt of `tokens` tokens fits the
        model and device."""
        option = option or flag("tokens")
        check_count(tokens, option)
        limit = getattr(self.config, "max_position_embeddings", None)
        if limit is not None and tokens > limit:
            raise ValueError(f"{option} {tokens}: more than the model's {limit} positions")
        check_fits(self.config, tokens, self.device, option, backends=[self.exact] + self.backends, tp=self.shard_tp,
                   weights=self._fit_weights(), pool=self._pool_bytes(tokens))
        self.longest = max(self.longest, tokens)
        if self.weights_requested == "auto" and self.fp8_checkpoint:  # fp8 where bf16 would not fit
            bf16_fits = fits_device(self.config, self.longest, self.device, tp=self.shard_tp, weights="bf16")
            self.spec = replace(self.spec, weights="bf16" if bf16_fits else "fp8")

    def pool_size(self, tokens: int) -> tuple[int, int] | None:
        """Under --calls serving, (rows, bytes) of the pool a prompt of `tokens` tokens gets on this device
        (`engine_pool.serving_pool`: ValueError naming --pool-rows when a given pool cannot hold it; a default
        grows); None for one-shot calls."""
        if self.options.engine is None:
            return None
        return serving_pool(self.config, self.options.engine.shape, tokens, self.device.type,
                            fp8=self.options.kv_cache_dtype is not None, dense_threshold=self.options.dense_threshold)

    def _pool_bytes(self, tokens: int) -> int:
        size = self.pool_size(tokens)
        return 0 if size is None else size[1]

    def check_cpu_time(self, lengths: list[int], option: str | None = None, *, each: int = 1) -> None:
        """On the CPU, ValueError naming `option` (default the argument `tokens`) when the check's forwards, every
        backend once a prompt of each of `lengths` (the exact reference twice), `each` times, would run for hours
        (`glmcheck.model.cpu_time`)."""
        if self.device.type != "cpu":
            return
        from glmcheck.model.cpu_time import check_cpu_time

        others = [b for b in dict.fromkeys(self.backends) if b != self.exact and b not in self.band]
        names = [self.exact, self.exact, *self.band, *others]
        forwards = [(length, name) for length in lengths for name in names] * each
        calls = 1 if self.dist or self.rehearse else self.tp  # kernel calls a layer in this process, H / tp heads each
        check_cpu_time(self.config, forwards, self.tp, option or flag("tokens"), calls=calls)

    def say_warnings(self) -> None:
        """The warnings on stderr, unless quiet (`--quiet` and quiet=True alike; the record keeps them)."""
        if self.quiet:
            return
        for warning in self.warnings:
            print(f"warning: {warning}", file=sys.stderr)


class ResumeStore:
    """The finished items of a resumable run in `directory`: read and checked against `fingerprint`
    when made, before any model is built. `directory` may be a zero-argument callable that creates a
    fresh one (the CLI's runs/<command>-<timestamp>): it is called at `start`, once the model is built, so
    a run refused earlier leaves nothing behind; None keeps nothing. With `overwrite` the record that was
    there is cleared at `start`. `total` items of kind `what` are requested; a resumed run says so."""

    def __init__(self, directory: Path | Callable[[], Path] | None, fingerprint: dict, *, overwrite: bool = False,
                 writable: bool = True, total: int | None = None, what: str = "items"):
        self.directory, self.fingerprint, self.writable = directory, fingerprint, writable
        self.overwrite, self.total, self.what = overwrite, total, what
        self.store = None
        if not overwrite and not callable(directory):
            self.store = ItemStore(directory, fingerprint, writable=writable)
        self.done = self.store.load() if self.store is not None else {}

    def start(self) -> Path | None:
        """Ready to save items; returns the record directory (made now when it was a callable)."""
        if callable(self.directory):
            self.directory = self.directory() if self.writable else None
        if self.store is None:
            if self.overwrite and self.writable and self.directory is not None:
                clear_record(self.directory)
            self.store = ItemStore(self.directory, self.fingerprint, writable=self.writable)
        if self.done and self.writable:
            of, left = ("", "") if self.total is None else (f" of {self.total}",
                                                            f"; {self.total - len(self.done)} left to compute")
            print(f"resuming {self.directory}: {len(self.done)}{of} {self.what} finished there earlier are kept{left} "
                  f"(--overwrite starts afresh)", file=sys.stderr)
        return self.directory

    def save(self, key: str, payload) -> None:
        self.store.save(key, payload)
