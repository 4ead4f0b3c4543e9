"""`tasks` and `tasks_compare`: task accuracy with a paired verdict (docs/tasks.md). lm-evaluation-harness runs each
task against each server (`glmcheck.tasks.harness.run_tasks`: its `local-completions` model over the server's
`/v1/completions`, sample logs kept), and every candidate is judged against the reference question by question
(`glmcheck.tasks.paired.paired_verdict`: the 2 x 2 table, McNemar's exact test, a paired bootstrap interval,
the control pair's own difference, the smallest drop this n detects at alpha and power; PASS, FAIL or
INCONCLUSIVE with the questions it would need). `tasks_compare` judges sample logs made elsewhere.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from glmcheck import __version__
from glmcheck.checks.band import FAIL, BadReference
from glmcheck.checks.rows import overall_of
from glmcheck.evaluate.arguments import check_count
from glmcheck.evaluate.endpoint_checks import RecordDir, Servers
from glmcheck.evaluate.options import CheckOptions
from glmcheck.evaluate.report import Report
from glmcheck.evaluate.setup import ResumeStore
from glmcheck.records.environment import code_identity
from glmcheck.sources.endpoint import Endpoint, parse_endpoint
from glmcheck.sources.transport import HttpOptions

SAMPLES_DIR = "samples"  # in the record: one folder of lm-eval sample logs per server


def _rule(max_drop: float, alpha: float, power: float) -> str:
    return (f"per task and candidate, paired over the same questions: FAIL when the candidate is worse by McNemar's "
            f"exact one-sided test at {alpha:g} and its drop exceeds {100 * max_drop:g} points; PASS when not, and "
            f"a drop of {100 * max_drop:g} points would have been detected with power {power:g} (the discordance "
            f"taken at its 95 % Clopper-Pearson upper bound); else INCONCLUSIVE, with the questions that would "
            f"be needed")


def _check_stats(max_drop: float, alpha: float, power: float) -> None:
    if not (isinstance(max_drop, numbers.Real) and 0 <= max_drop < 1):
        shown = 100 * max_drop if isinstance(max_drop, numbers.Real) else max_drop
        raise ValueError(f"--max-drop must be in [0, 100) points, got {shown!r}")
    if not (isinstance(alpha, numbers.Real) and isinstance(power, numbers.Real) and 0 < alpha < power < 1):
        raise ValueError(f"--alpha and --power must satisfy 0 < alpha < power < 1, got {alpha!r} and {power!r}")


def judge(reference: dict, candidates: dict[str, dict], control: dict | None, *, max_drop: float, alpha: float,
          power: float, faults: dict[str, str] | None = None) -> tuple[list[dict], list[str]]:
    """Rows (one per candidate and task) of `paired_verdict` and the warnings. `reference`, each candidate's and
    `control` map task -> TaskSamples; a task missing from a candidate, or run with another metric, is a ValueError.
    `faults` maps candidates that gave no answers (their server answered non-finite logits) to why: a FAIL row for
    each task."""
    from glmcheck.tasks.paired import paired_verdict

    rows, warnings = [], []
    for name, why in (faults or {}).items():
        rows += [{"candidate": name, "task": task, "metric": ref.metric_key, "verdict": FAIL, "reason": why,
                  "fault": why} for task, ref in reference.items()]
    for name, theirs in candidates.items():
        for task, ref in reference.items():
            if task not in theirs:
                raise ValueError(f"candidate {name} has no results for task {task!r} (it has "
                                 f"{', '.join(sorted(theirs)) or 'none'})")
            mine = theirs[task]
            if mine.metric_key != ref.metric_key:
                raise ValueError(f"task {task!r}: candidate {name} was judged by {mine.metric_key}, the reference by "
                                 f"{ref.metric_key}; pass --metric to judge both alike")
            extra = control[task].correct if control and task in control else None
            verdict = paired_verdict(ref.correct, mine.correct, control=extra, max_drop=max_drop, alpha=alpha,
                                     power=power)
            if verdict.warning:
                warnings.append(f"{task}: {verdict.warning}")
            rows.append({"candidate": name, "task": task, "metric": ref.metric_key, **verdict.as_dict()})
    return rows, warnings


def _samples_record(samples: dict) -> dict:
    return {task: asdict(s) for task, s in samples.items()}


def tasks(endpoints: Sequence[str | Endpoint], task_names: Sequence[str], *, control: str | Endpoint | None = None,
          tokenizer: CheckOptions | None = None, limit: int | None = None, max_drop: float = 0.01,
          alpha: float = 0.05, power: float = 0.8, metric: str | None = None, batch_size: int = 8,
          concurrency: int = 4, http: HttpOptions | None = None, record_dir: RecordDir = None,
          overwrite: bool = False, quiet: bool = False) -> Report:
    """`glmcheck tasks --endpoint ref=URL --endpoint cand=URL ... --tasks NAMES`: lm-eval's tasks against every
    server (the first endpoint the reference), each candidate judged against it. The control pair: `control`
    (another instance of the reference), else the reference asked again. `tokenizer` names the servers' model's
    checkpoint (its tokenizer files: lm-eval sends token ids). Resumable per server in `record_dir` (a server's
    finished results are kept; its sample logs lie in <record>/samples/<name>/)."""
    from glmcheck.model.load import ModelSpec
    from glmcheck.tasks.harness import TaskSamples, run_tasks
    from glmcheck.tasks.lm_eval_quiet import NonFiniteServer

    _check_stats(max_drop, alpha, power)
    check_count(limit, "--limit")
    if not task_names:
        raise ValueError("--tasks names no task")
    options = tokenizer or CheckOptions()
    spec = ModelSpec(preset=options.model, checkpoint=options.checkpoint)
    if spec.checkpoint is None:
        raise ValueError(f"--model {options.model} has no tokenizer files: name the servers' model with --model (a "
                         f"trained model) or --checkpoint DIR (its tokenizer is read from there)")
    extra = [control if isinstance(control, Endpoint) else parse_endpoint(control, "--control")] if control else []
    servers = Servers(list(endpoints), extra, http or HttpOptions(), concurrency)
    reference = servers.reference
    control_name = extra[0].name if extra else f"{reference.name} (rerun)"
    runs = [(reference.name, reference), (control_name, servers.band[0] if extra else reference)] + \
        [(e.name, e) for e in servers.candidates]
    fingerprint = {"command": "tasks", "servers": servers.identity(), "tasks": list(task_names), "limit": limit,
                   "metric": metric, "tokenizer": spec.describe(), "code": code_identity()}
    resume = ResumeStore(record_dir, fingerprint, overwrite=overwrite, total=len(runs), what="servers")
    directory = resume.start()
    results: dict[str, dict] = {}
    faults: dict[str, str] = {}
    candidates = {e.name for e in servers.candidates}
    for name, endpoint in runs:
        if name in resume.done:
            results[name] = {task: TaskSamples(**s) for task, s in resume.done[name].items()}
            continue
        out = Path(directory) / SAMPLES_DIR / name.replace(" ", "_").replace("(", "").replace(")", "") \
            if directory else None
        if not quiet:
            print(f"tasks: {', '.join(task_names)} against {name} ({endpoint.url})", flush=True)
        try:
            results[name] = run_tasks(endpoint.url, list(task_names), model=endpoint.model,
                                      tokenizer=spec.checkpoint, limit=limit, batch_size=batch_size,
                                      concurrency=concurrency, output_dir=out, quiet=quiet, metric=metric)
        except NonFiniteServer as err:  # a candidate's kernel gave NaN: its FAIL; the reference's: bad input
            if name not in candidates:
                raise BadReference(f"{err} (the reference or its control: bad input, not a kernel fault)") from None
            faults[name] = str(err)
            continue
        resume.save(name, _samples_record(results[name]))
    rows, warnings = judge(results[reference.name], {e.name: results[e.name] for e in servers.candidates
                                                     if e.name not in faults},
                           results[control_name], max_drop=max_drop, alpha=alpha, power=power, faults=faults)
    accuracies = {name: {task: s.accuracy for task, s in got.items()} for name, got in results.items()}
    facts = {"gate": _rule(max_drop, alpha, power), "tasks": list(task_names), "limit": limit, "control": control_name,
             "accuracies": accuracies, "lm_eval_version": next(iter(results[reference.name].values())).lm_eval_version,
             "source": "endpoints", "resumed_items": len(resume.done)}
    return Report("tasks", overall_of([r["verdict"] for r in rows]), rows, facts,
                  {"endpoints": servers.record(), "glmcheck": __version__, "tokenizer": spec.describe()},
                  {"endpoints": [reference.spec()] + [e.spec() for e in servers.candidates],
                   "control": control_name, "max_drop": max_drop, "alpha": alpha, "power": power, "metric": metric,
                   "batch_size": batch_size, "concurrency": concurrency}, warnings,
                  extra={"samples": {n: {t: s.source for t, s in got.items()} for n, got in results.items()}},
                  record_dir=directory)


def tasks_compare(reference: str | Path, candidates: Sequence[str | Path], *, control: str | Path | None = None,
                  max_drop: float = 0.01, alpha: float = 0.05, power: float = 0.8, metric: str | None = None) -> Report:
    """`glmcheck tasks compare A B [...] [--control C]`: judge lm-eval sample logs made elsewhere (each a
    samples_<task>_<date>.jsonl file, or a folder of them: one task a file) against the reference's A."""
    from glmcheck.tasks.harness import read_samples

    _check_stats(max_drop, alpha, power)
    if not candidates:
        raise ValueError("tasks compare: name the reference's sample log and at least one candidate's")

    def load(path) -> dict:
        path = Path(path)
        files = sorted(path.glob("samples_*.jsonl")) if path.is_dir() else [path]
        if not files:
            raise ValueError(f"{path}: no samples_<task>_<date>.jsonl file there")
        got = [read_samples(f, metric=metric) for f in files]
        return {s.task: s for s in got}

    ref = load(reference)
    named = {f"candidate {i + 1} ({Path(p).name})": load(p) for i, p in enumerate(candidates)}
    rows, warnings = judge(ref, named, load(control) if control else None, max_drop=max_drop, alpha=alpha,
                           power=power)
    facts = {"gate": _rule(max_drop, alpha, power), "tasks": sorted(ref), "source": "sample logs",
             "control": str(control) if control else None}
    return Report("tasks", overall_of([r["verdict"] for r in rows]), rows, facts,
                  {"reference": str(reference), "candidates": [str(p) for p in candidates], "glmcheck": __version__},
                  {"max_drop": max_drop, "alpha": alpha, "power": power, "metric": metric}, warnings)
