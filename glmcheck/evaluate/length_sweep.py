"""`sweep`: the length sweep in process (`glmcheck.checks.position_sweep`): one forward per row over the longest
length of a geometric grid of one long natural prompt (held-out text of a checkpoint with a tokenizer, seeded ids
otherwise); every position's next-token distribution against the exact reference's, binned by prompt length and
judged beside the band's same positions (the exact reference rerun and the band's ideal bf16 kernels)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from glmcheck.backends.errors import KernelFault
from glmcheck.backends.names import band_names
from glmcheck.checks.band import SWEEP_BAND
from glmcheck.checks.position_sweep import run_position_sweep, sweep_outcome
from glmcheck.checks.positions import position_statistics
from glmcheck.checks.rows import require_finite
from glmcheck.checks.runner import forward_under
from glmcheck.checks.sweep import Faulted, SweepResult, geometric_lengths, rerun_name
from glmcheck.data.model_prompts import model_prompt, prompt_source
from glmcheck.evaluate.arguments import check_count, check_forwards
from glmcheck.evaluate.bars import forward_bar
from glmcheck.evaluate.model_checks import _build, _report, layer_command
from glmcheck.evaluate.options import GPU_SWEEP_RANGE, CheckOptions
from glmcheck.evaluate.report import Report
from glmcheck.evaluate.setup import ResumeStore, Setup, in_forms
from glmcheck.process.wording import flag
from glmcheck.startup import compile_ahead

DIAGNOSIS_KEYS = ("diagnosis", "beyond_first", "beyond_runs", "beyond_period", "layer0")  # a FAIL row's, in its onset
MAX_LOGPROBS = 20  # what vLLM serves by default (--max-logprobs); in process any k would do


def check_logprobs(k: int) -> None:
    """`logprobs` (--logprobs): the reference's top-k tokens the distance is taken over."""
    check_count(k, flag("logprobs"))
    if k > MAX_LOGPROBS:
        raise ValueError(f"{flag('logprobs')} must be in [1, {MAX_LOGPROBS}] (servers cap it; vLLM's default cap is "
                         f"20), got {k}")


@in_forms
def sweep(options: CheckOptions, *, tokens: tuple[int, int] | None = None, per_octave: int = 1, logprobs: int = 5,
          record_dir: Path | Callable[[], Path] | None = None, overwrite: bool = False) -> Report:
    """Sweep `tokens` = (first, last) (`geometric_lengths`; default 1024..32768 on a GPU, 32..256 on the CPU)
    under every backend of `options` (hf_* cross-checks attend densely and are refused): one forward per row over
    the longest length, its positions binned by length (module docstring). `logprobs` is checked and recorded
    (the endpoint sweep's top-K); in process every position is compared over the full vocabulary.
    A finished record in `record_dir` is read back instead of recomputed."""
    check_logprobs(logprobs)
    setup = Setup(replace(options, band=SWEEP_BAND) if options.band is None else options)
    lengths = geometric_lengths(*(tokens or (GPU_SWEEP_RANGE if setup.device.type == "cuda" else (32, 256))),
                                per_octave)
    dense = [b for b in setup.backends if b.startswith("hf_")]
    if dense and options.backend_list() is not None:
        raise ValueError(f"{flag('backends')}: {', '.join(dense)} attend densely ([T, T] scores) and are cross-checks "
                         f"of the reference, not kernels under test; the sweep judges absorbed backends")
    judged = [b for b in setup.backends if not b.startswith("hf_") and b != setup.exact
              and b not in band_names(setup.band_size)]
    band = band_names(setup.band_size)
    forwards = 3 + len(band) + len(judged)  # the reference's long forward and its two short reruns, every other row
    check_forwards(forwards, f"{forwards} forwards ({flag('band')}, {flag('backends')})")
    setup.check_prompt(lengths[-1], f"{flag('tokens')} (its longest length)")
    setup.check_cpu_time(lengths[-1:], f"{flag('tokens')} (its longest length)")
    resume = ResumeStore(record_dir, setup.fingerprint("sweep", lengths=lengths, logprobs=logprobs,
                                                       seed=options.seed),
                         overwrite=overwrite, writable=setup.is_main, total=len(lengths), what="lengths")
    done = {int(key): payload for key, payload in resume.done.items()}
    model = _build(setup)
    directory = resume.start()
    last = lengths[-1]
    if len(done) < len(lengths):  # one forward per row covers every length: a partial record is recomputed whole
        prompt = model_prompt(setup.spec, model.config.vocab_size, last, options.seed, setup.device)
        result = _sweep(model, prompt, setup, band, judged, lengths)
        for length in lengths:
            resume.save(str(length), [r for r in result.rows if r["tokens"] == length])
        done = {}
    else:
        result = sweep_outcome([r for length in lengths for r in done[length]], judged, lengths)
        for row in result.rows:  # the diagnosis a finished run kept on its last length's rows
            if row["tokens"] == last and row.get("diagnosis"):
                result.onsets[row["backend"]] |= {k: row.get(k) for k in DIAGNOSIS_KEYS}
    for name, onset in result.onsets.items():
        if onset.get("layer0"):
            command = layer_command(options, setup, name, onset["layer0"], last, options.seed)
            onset["diagnosis"] += f" (shown by: {command})"
    facts = {**result.facts, "reference": setup.exact, "band": band, "source": "in process",
             "prompt_source": prompt_source(setup.spec), "resumed_items": len(done),
             "forwards": 1 + len(band) + len(judged), "short_forwards": 2}
    return _report("sweep", setup, model, result.verdict, result.rows, facts, extra={"onsets": result.onsets},
                   record_dir=directory)


def _sweep(model, prompt, setup: Setup, band: list[str], judged: list[str], lengths: list[int]) -> SweepResult:
    """One forward per row over `prompt` (every position kept), each against the exact reference's, judged by bin
    (`run_position_sweep`)."""
    last = prompt.shape[1]
    with forward_bar(3 + len(band) + len(judged), "sweep forwards", setup.quiet) as bar:
        def logits(name: str, tokens=prompt, kept: int = last, ahead_of: list[str] | None = None):
            try:
                record = ahead_of is not None and compile_ahead.enabled(tokens.device)
                run = forward_under(model, tokens, name, setup.options, last_logits=kept, record_calls=record)
                if record:
                    compile_ahead.after(run, ahead_of, setup.options)
            except KernelFault as fault:
                if name == setup.exact or name in band:  # glmcheck's own
                    raise
                return Faulted(fault.reason)
            finally:
                bar.update(1)
            expected, seen = run.missing_calls(model.config.num_hidden_layers, setup.options.tp)
            if expected:  # a silent no-op
                return Faulted(f"expected {expected} kernel calls, saw {seen}")
            if name == setup.exact or name in band:  # NaN in the reference or a band sample: bad input
                require_finite(model, run.captured.logits, f"logits at {kept} tokens", name, setup.exact)
            return run.captured.logits

        reference = logits(setup.exact, ahead_of=[*band, *judged])
        # The rerun shows whether the exact reference repeats itself; the gate reads the band variants only, so it
        # is two forwards over the first bin's prompt (docs/performance.md, "Time to verdict": the sweep's rerun).
        # Not the long forward's first positions: other shapes may take other (deterministic) GEMM algorithms.
        first = lengths[0]
        short = [logits(setup.exact, prompt[:, :first], first) for _ in range(2)]
        stats = {rerun_name(setup.exact): position_statistics(short[1], short[0])}
        for name in [*band, *judged]:
            got = logits(name)
            stats[name] = got if isinstance(got, Faulted) else position_statistics(got, reference)
            del got  # the next forward runs beside the reference's logits alone
    result = run_position_sweep(stats, rerun_name(setup.exact), band, judged, lengths)
    _diagnose(model, prompt, setup, stats, band, result)
    return result


def _diagnose(model, prompt, setup: Setup, stats: dict, band: list[str], result: SweepResult) -> None:
    """Each FAIL row's positions beyond the band over the whole forward and whether layer 0 of the prompt fails too
    (`glmcheck.checks.diagnosis_positions`), in its onset entry."""
    from glmcheck.checks.band import FAIL
    from glmcheck.checks.diagnosis_positions import beyond_summary, layer0_probe, probe_text, summary_text
    from glmcheck.checks.position_gate import PositionBand, PositionGate

    failing = [n for n, o in result.onsets.items() if o["verdict"] == FAIL and not isinstance(stats[n], Faulted)]
    last = [r for r in result.rows if r["tokens"] == result.facts["lengths"][-1] and r["role"] == "judged"]
    for row in last:  # kept with the rows too, so that a resumed run has it (every judged row: one format)
        row |= {"diagnosis": "", "beyond_first": None, "beyond_runs": None, "beyond_period": None, "layer0": ""}
    if not failing:
        return
    gate = PositionGate()
    allowed = PositionBand.of([stats[b] for b in band], band).allowed(gate.position_ratio, gate.neighbours)
    probes = layer0_probe(model, prompt, failing, setup.exact, setup.options, band_size=len(band))
    for name in failing:
        summary = beyond_summary(stats[name].distance, allowed)
        entry = {"beyond_first": summary["first"], "beyond_runs": summary["runs"], "beyond_period": summary["period"],
                 "diagnosis": summary_text(summary), "layer0": ""}
        if name in probes:
            entry |= {"layer0": probes[name]["verdict"]}
            entry["diagnosis"] += "; " + probe_text(probes[name])
        result.onsets[name] |= entry
        for row in last:
            if row["backend"] == name:
                row |= entry
