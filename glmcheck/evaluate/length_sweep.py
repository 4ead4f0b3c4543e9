"""`sweep`: the length sweep in process (`glmcheck.checks.sweep`): at each prompt length of a
geometric grid every backend's next-token distributions at the last W positions of the first L tokens of one long
natural prompt (held-out text of a checkpoint with a tokenizer, seeded ids otherwise), against the
exact reference rerun and the band's ideal bf16 kernels at that length."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tqdm import tqdm

from glmcheck.arguments import check_count, check_forwards
from glmcheck.backends.errors import KernelFault
from glmcheck.checks.band import band_names
from glmcheck.checks.common import require_finite
from glmcheck.checks.distributions import FullDistribution
from glmcheck.checks.runner import forward_under
from glmcheck.checks.sweep import Faulted, geometric_lengths, rerun_name, run_sweep
from glmcheck.data.model_prompts import model_prompt, prompt_source
from glmcheck.evaluate.model_checks import _build, _report
from glmcheck.evaluate.options import CheckOptions
from glmcheck.evaluate.report import Report
from glmcheck.evaluate.setup import ResumeStore, Setup

MAX_LOGPROBS = 20  # what vLLM serves by default (--max-logprobs); in process any k would do


def check_logprobs(k: int) -> None:
    """--logprobs: the reference's top-k tokens the distance is taken over."""
    check_count(k, "--logprobs")
    if k > MAX_LOGPROBS:
        raise ValueError(f"--logprobs must be in [1, {MAX_LOGPROBS}] (servers cap it; vLLM's default cap is 20), "
                         f"got {k}")


def check_window(window: int, first: int) -> None:
    """--window: positions at the end of each length whose distributions are compared."""
    check_count(window, "--window")
    if window > first:
        raise ValueError(f"--window {window} is longer than the sweep's first length {first}")


def sweep(options: CheckOptions, *, tokens: tuple[int, int] | None = None, per_octave: int = 1, logprobs: int = 5,
          window: int = 16, record_dir: Path | Callable[[], Path] | None = None, overwrite: bool = False) -> Report:
    """Sweep `tokens` = (first, last) (`geometric_lengths`; default 1024..32768 on a GPU, 32..256 on the CPU)
    under every backend of `options` (hf_* cross-checks attend densely and are refused). Resumable per
    length in `record_dir`."""
    check_logprobs(logprobs)
    setup = Setup(options)
    lengths = geometric_lengths(*(tokens or ((1024, 32768) if setup.device.type == "cuda" else (32, 256))),
                                per_octave)
    check_window(window, lengths[0])
    dense = [b for b in setup.backends if b.startswith("hf_")]
    if dense and options.backend_list() is not None:
        raise ValueError(f"--backends: {', '.join(dense)} attend densely ([T, T] scores) and are cross-checks of the "
                         f"reference, not kernels under test; the sweep judges absorbed backends")
    judged = [b for b in setup.backends if not b.startswith("hf_") and b != setup.exact
              and b not in band_names(setup.band_size)]
    band = band_names(setup.band_size)
    check_forwards(len(lengths) * (2 + len(band) + len(judged)),
                   f"{len(lengths)} lengths x {2 + len(band) + len(judged)} forwards (--tokens, --per-octave, --band, "
                   f"--backends)")
    setup.check_prompt(lengths[-1], "--tokens (its longest length)")
    resume = ResumeStore(record_dir, setup.fingerprint("sweep", lengths=lengths, logprobs=logprobs, window=window,
                                                       seed=options.seed),
                         overwrite=overwrite, writable=setup.is_main, total=len(lengths), what="lengths")
    done = {int(key): payload for key, payload in resume.done.items()}
    model = _build(setup)
    directory = resume.start()
    prompt = model_prompt(setup.spec, model.config.vocab_size, lengths[-1], options.seed, setup.device)

    def distributions(name: str, length: int) -> list[FullDistribution] | Faulted:
        try:
            run = forward_under(model, prompt[:, :length], name, setup.options, last_logits=window)
        except KernelFault as fault:
            if name == setup.exact or name in band:  # glmcheck's own
                raise
            return Faulted(fault.reason)
        expected, seen = run.missing_calls(model.config.num_hidden_layers, setup.options.tp)
        if expected:  # a silent no-op
            return Faulted(f"expected {expected} kernel calls, saw {seen}")
        logits = run.captured.logits[0]
        if name == setup.exact or name in band:  # NaN in the reference or a band sample: bad input
            require_finite(model, logits, f"logits at {length} tokens", name, setup.exact)
        return [FullDistribution.from_logits(position) for position in logits]

    def fetch(length: int) -> dict[str, list[FullDistribution]]:
        rows = {setup.exact: distributions(setup.exact, length)}
        rows[rerun_name(setup.exact)] = distributions(setup.exact, length)  # asked again, after the first
        return rows | {name: distributions(name, length) for name in [*band, *judged]}

    with tqdm(total=len(lengths), initial=len(done), desc="sweep lengths", disable=setup.quiet, leave=False) as bar:
        def finished(length, rows):
            resume.save(str(length), rows)
            bar.update(1)

        result = run_sweep(fetch, setup.exact, band, judged, lengths, k=logprobs, gate_ratio=options.gate_ratio,
                           window=window, on_length=finished, done=done)
    facts = {**result.facts, "source": "in process", "prompt_source": prompt_source(setup.spec),
             "resumed_items": len(done)}
    return _report("sweep", setup, model, result.verdict, result.rows, facts, extra={"onsets": result.onsets},
                   record_dir=directory)
