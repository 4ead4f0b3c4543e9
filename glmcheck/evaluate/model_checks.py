"""One library call per in-process model check: `layer0`, `logits`, `firsttoken`, `drift`.

Each takes the shared `CheckOptions` plus its own options, checks them all before any model is
built (ValueError naming the flag), builds the model, runs the check and returns a `Report`
(rows, verdict, facts). The CLI parses, calls one of these and prints / writes the report;
notebooks and tests call the same functions:

    from glmcheck.evaluate import CheckOptions, layer0
    report = layer0(CheckOptions(model="ref-cpu", backends=["triton_sparse_mla"]), tokens=128)
    report.verdict, report.rows

`logits` and `firsttoken` are resumable: given `record_dir`, finished items (lengths, prompts) are
kept there as they finish and a rerun with the same settings computes only the rest (`record_dir` may
be a callable that makes a fresh directory once the model is built; the report's `record_dir` is the one
used).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from glmcheck.checks.rows import ComparisonRow
from glmcheck.data.model_prompts import model_prompt, prompt_source
from glmcheck.data.model_tokenizer import model_tokenizer
from glmcheck.data.prompts import default_prompt_set
from glmcheck.evaluate.arguments import (
    check_count,
    check_forwards,
    check_lengths,
    check_number,
    check_repro_dir,
    check_text,
    check_tie_gap,
)
from glmcheck.evaluate.bars import forward_bar
from glmcheck.evaluate.options import GPU_LOGITS_LENGTHS, CheckOptions
from glmcheck.evaluate.report import Report
from glmcheck.evaluate.setup import ResumeStore, Setup, in_forms
from glmcheck.model.load import load_model
from glmcheck.process.phases import CLOCK
from glmcheck.process.wording import flag
from glmcheck.records.environment import config_hash

RecordDir = Path | Callable[[], Path] | None  # where a resumable run keeps its items (`ResumeStore`)


def _report(command: str, setup: Setup, model, verdict: str, rows: list[dict], facts: dict, **kw) -> Report:
    if setup.options.engine is not None:  # --calls serving: the shapes that ran, each row against its one-shot call
        facts = {**facts, "engine_calls": setup.options.engine.summary()}
    if setup.rehearse:  # no verdict: the measurements instead (`glmcheck.evaluate.rehearsal`)
        from glmcheck.evaluate import rehearsal

        verdict, rows, facts, kw["extra"] = rehearsal.conclude(setup, rows, facts, kw.get("extra", {}))
    return Report(command, verdict, rows, facts,
                  {**setup.spec.describe(), "config_hash": config_hash(model.config),
                   "layers_built": model.config.num_hidden_layers},
                  setup.describe(), setup.warnings, is_main=setup.is_main, **kw)


def _build(setup: Setup, *, layer0_only: bool = False):
    setup.say_warnings()
    with CLOCK.phase("build"):
        if not setup.rehearse:
            return load_model(setup.spec, setup.device, layer0_only=layer0_only)
        from glmcheck.evaluate import rehearsal

        started = rehearsal.before_build(setup)
        model = load_model(setup.spec, setup.device, layer0_only=layer0_only, rehearse=setup.rehearse)
        rehearsal.after_build(setup, model, started)
        return model


@in_forms
def layer0(options: CheckOptions, *, tokens: int | None = None, text: str | None = None,
           repro: str | Path | None = None) -> Report:
    """The layer-0 attention output of every backend against the exact reference, beside the band
    (`glmcheck.checks.layer0`). The prompt: `text` tokenised and repeated up to `tokens`, else held-out
    text of a checkpoint that has a tokenizer, else seeded ids; `tokens` defaults to 4096 on a GPU, 128
    on the CPU. FAIL rows are diagnosed (facts["diagnoses"]); with `repro` a directory, each FAIL row's kernel call
    is cut to a minimal repro there (`glmcheck.checks.repro`)."""
    import torch

    from glmcheck.checks.layer0 import run_layer0
    from glmcheck.data.prompts import text_prompt

    check_text(text)
    check_repro_dir(repro)
    setup = Setup(options, layer0_only=True, one_prompt=True, tokens=tokens)
    length = setup.tokens
    text_ids = None
    if text is not None:
        text_ids = model_tokenizer(setup.spec, setup.config.vocab_size).encode(text)
        setup.check_prompt(max(len(text_ids), length), f"{flag('text')} (tokens)")
    model = _build(setup, layer0_only=True)
    ids = text_prompt(text_ids, tokens, setup.device) if text_ids is not None else \
        model_prompt(setup.spec, model.config.vocab_size, length, options.seed, setup.device)
    with forward_bar(setup.forwards + 1, "layer0 forwards", setup.quiet) as bar, torch.inference_mode():
        result = run_layer0(model, ids, setup.backends, setup.exact, setup.options, setup.gate,
                            band_size=setup.band_size, baseline=setup.baseline, progress=bar,
                            repro=Path(repro) if repro is not None else None)
    return _report("layer0", setup, model, result.verdict, [r.as_dict() for r in result.rows],
                   {**result.facts, "prompt_source": prompt_source(setup.spec)}, tensors=result.tensors)


@in_forms
def drift(options: CheckOptions, *, tokens: int | None = None, repro: str | Path | None = None) -> Report:
    """Every layer's hidden state per backend against the exact reference, beside the per-layer band
    (`glmcheck.checks.drift`); `tokens` and `repro` (of each FAIL backend's first failing layer call) as in
    `layer0`."""
    from glmcheck.checks.drift import run_drift

    check_repro_dir(repro)
    setup = Setup(options, one_prompt=True, tokens=tokens)
    length = setup.tokens
    model = _build(setup)
    ids = model_prompt(setup.spec, model.config.vocab_size, length, options.seed, setup.device)
    with forward_bar(setup.forwards, "drift forwards", setup.quiet) as bar:
        result = run_drift(model, ids, setup.backends, setup.exact, setup.options, setup.gate,
                           band_size=setup.band_size, progress=bar, repro=Path(repro) if repro is not None else None)
    return _report("drift", setup, model, result.verdict, [r.as_dict() for r in result.rows],
                   {**result.facts, "prompt_source": prompt_source(setup.spec)})


@in_forms
def logits(options: CheckOptions, *, tokens: list[int] | None = None, record_dir: RecordDir = None,
           overwrite: bool = False) -> Report:
    """Next-token distributions at every position, over the full vocabulary, per backend and prompt length
    (`glmcheck.checks.logits`: judged by `glmcheck.checks.position_gate`, the final position shown beside);
    `tokens` defaults to 2048, 4096, 8192 on a GPU and 64, 128 on the CPU. Resumable in `record_dir`."""
    from glmcheck.checks.logits import run_logits
    from glmcheck.checks.position_gate import PositionGate

    check_lengths(tokens)
    setup = Setup(options)
    default = list(GPU_LOGITS_LENGTHS) if setup.device.type == "cuda" else [64, 128]
    lengths = list(tokens) if tokens is not None else default
    check_forwards(len(lengths) * setup.forwards,
                   f"{len(lengths)} lengths x {setup.forwards} forwards each ({flag('tokens')}, {flag('band')}, "
                   f"{flag('backends')})")
    for length in lengths:
        setup.check_prompt(length)
    setup.check_cpu_time(lengths)
    resume = ResumeStore(record_dir, setup.fingerprint("logits", lengths=lengths, seed=options.seed),
                         overwrite=overwrite, writable=setup.is_main, total=len(lengths), what="lengths")
    done = {int(key): [ComparisonRow(**r) for r in payload] for key, payload in resume.done.items()}
    model = _build(setup)
    directory = resume.start()
    prompts = [model_prompt(setup.spec, model.config.vocab_size, n, options.seed + n, setup.device) for n in lengths]
    with forward_bar(len(lengths) * setup.forwards, "logits forwards", setup.quiet, len(done) * setup.forwards) as bar:
        def finished(length, rows):
            resume.save(str(length), [dataclasses.asdict(r) for r in rows])

        result = run_logits(model, prompts, setup.backends, setup.exact, setup.options, PositionGate(),
                            band_size=setup.band_size, baseline=setup.baseline, on_length=finished, done=done,
                            progress=bar)
    _add_commands(result.rows, options, setup)
    return _report("logits", setup, model, result.verdict, [r.as_dict() for r in result.rows],
                   {**result.facts, "resumed_items": len(done), "prompt_source": prompt_source(setup.spec)},
                   tensors=result.tensors, record_dir=directory)


def layer_command(options: CheckOptions, setup: Setup, backend: str, verdict: str, tokens: int, seed: int) -> str:
    """The command that shows a logits or sweep FAIL's layer (`diagnosis_text.check_command`): layer0 when layer 0
    fails too (`verdict`), else drift; `seed` the prompt's on a model that reads text (its seed picks the prompt
    only), the run's on a dummy preset (whose weights it seeds)."""
    from glmcheck.checks.diagnosis_text import check_command, command_for
    from glmcheck.checks.repro import kernel_spec
    from glmcheck.data.model_prompts import reads_text

    return check_command(command_for(verdict), options, kernel_spec(backend) or backend, tokens,
                         seed if reads_text(setup.spec) else options.seed)


def _add_commands(rows: list[ComparisonRow], options: CheckOptions, setup: Setup) -> None:
    """Append to each diagnosed logits row the command that shows its layer (`layer_command`)."""
    for row in rows:
        if row.extra.get("layer0"):
            command = layer_command(options, setup, row.backend, row.extra["layer0"], row.tokens,
                                    options.seed + row.tokens)
            row.extra["diagnosis"] += f" (shown by: {command})"


@in_forms
def firsttoken(options: CheckOptions, *, prompts: str | None = None, limit: int | None = None,
               continue_tokens: int = 0, tie_gap: float | None = None, max_dlogprob: float | None = None,
               record_dir: RecordDir = None, overwrite: bool = False) -> Report:
    """The greedy first token of each prompt per backend (`glmcheck.checks.firsttoken`): `prompts` a set
    name or a JSONL path (default heldout50 on a trained model, natural50 otherwise), the first `limit`
    of them; `continue_tokens` > 0 also compares greedy continuations. Resumable in `record_dir`."""
    from glmcheck.checks.firsttoken import DEFAULT_TIE_GAP, PromptOutcome, forwards_per_prompt, run_firsttoken
    from glmcheck.data.prompts import load_prompts

    tie_gap = DEFAULT_TIE_GAP if tie_gap is None else tie_gap
    check_count(limit, flag("limit"))
    check_count(continue_tokens, flag("continue_tokens"), minimum=0)
    check_tie_gap(tie_gap, flag("tie_gap"))
    check_number(max_dlogprob, flag("max_dlogprob"), positive=True)
    setup = Setup(options)
    prompt_set = prompts or default_prompt_set(setup.spec.trained)
    chosen = load_prompts(prompt_set, limit)
    steps = 1 + continue_tokens  # a continuation re-runs the prefill for every step
    check_forwards(len(chosen) * setup.forwards * steps,
                   f"{len(chosen)} prompts x {setup.forwards} forwards x {steps} steps ("
                   + ", ".join(flag(n) for n in ("prompts", "limit", "band", "backends", "continue_tokens")) + ")")
    tokenizer = model_tokenizer(setup.spec, setup.config.vocab_size)
    prompt_lengths = [len(tokenizer.encode(prompt.prompt)) + continue_tokens for prompt in chosen]
    for prompt, length in zip(chosen, prompt_lengths):
        setup.check_prompt(length, f"{flag('prompts')} {prompt_set}: prompt {prompt.id!r} of tokens")
    setup.check_cpu_time(prompt_lengths, f"{flag('prompts')} {prompt_set} ({len(chosen)} prompts)", each=steps)
    resume = ResumeStore(record_dir, setup.fingerprint("firsttoken", prompts={p.id: p.prompt for p in chosen},
                                                       continue_tokens=continue_tokens, tie_gap=tie_gap,
                                                       max_dlogprob=max_dlogprob),
                         overwrite=overwrite, writable=setup.is_main, total=len(chosen), what="prompts")
    done = {key: [PromptOutcome(**o) for o in payload] for key, payload in resume.done.items()}
    model = _build(setup)
    directory = resume.start()
    each = forwards_per_prompt(setup.backends, setup.exact, setup.band_size, continue_tokens)
    with forward_bar(len(chosen) * each, "firsttoken forwards", setup.quiet, len(done) * each) as bar:
        def finished(prompt, outcomes):
            resume.save(prompt.id, [dataclasses.asdict(o) for o in outcomes])

        result = run_firsttoken(model, tokenizer, chosen, setup.backends, setup.exact, setup.options,
                                gate_ratio=options.gate_ratio, max_dlogprob=max_dlogprob, band_size=setup.band_size,
                                tie_gap=tie_gap, continue_tokens=continue_tokens, device=setup.device,
                                on_prompt=finished, done=done, progress=bar)
    facts = {**result.facts, "prompt_set": prompt_set, "prompts": len(chosen), "resumed_items": len(done)}
    return _report("firsttoken", setup, model, result.verdict, [dataclasses.asdict(o) for o in result.outcomes], facts,
                   extra={"summary_rows": result.summary_rows, "disagreements": result.disagreements},
                   record_dir=directory)
