"""One task's per-question results from lm-eval's samples (`TaskSamples`), and the metric rule that makes
each sample right or wrong (`choose_metric`).

`glmcheck.tasks.harness.run_tasks` and `glmcheck.tasks.sample_logs.read_samples` return one `TaskSamples`
per task lm-eval ran (a group gives its subtasks):

- `metric` (and `filter`): the task's primary per-question metric, chosen as below;
- `correct`: question id -> right or wrong, in lm-eval's doc order. A question id is
  `"<doc_id>:<first 16 hex of doc_hash>"`: lm-eval's doc_id (the document's index in the task's split)
  and lm-eval's own `doc_hash` (sha256 of the document as JSON), so two runs pair by id and a run over
  other documents at the same indices (another dataset revision) pairs with nothing;
- `accuracy` (the mean of `correct`), `reported` (lm-eval's own aggregate of that metric: the same number
  for a mean metric), `lm_eval_version`, `asked` (what was asked: URL, model, tokenizer, limit, few-shot,
  task version, batch size, concurrency, lm-eval's task hash, what the server said it serves) and
  `source` (the sample log it was written to or read from).

**The metric.** glmcheck judges question by question, so the metric must be one a question gets 0 or 1:
the first metric, in the order lm-eval lists it for the samples (a sample's `metrics`: the task's
`metric_list` order; multiple choice: acc before acc_norm), whose value is 0 or 1 on every sample, under
the first filter of the task (its `filter_list` order; "none" when it has none). So a log-likelihood task
(multiple_choice: acc) is judged by acc, gsm8k by exact_match under its first filter "strict-match", hellaswag
by acc (not acc_norm). `metric="acc_norm"` or `"exact_match,flexible-extract"` (lm-eval's `metric,filter`)
picks another. A task with no 0/1 metric (perplexity, BLEU) is a ValueError.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

ID_HASH_CHARS = 16


@dataclass(frozen=True)
class TaskSamples:
    """One task's per-question results (module docstring). `correct` maps question id -> bool."""

    task: str
    metric: str
    filter: str
    correct: dict[str, bool]
    lm_eval_version: str | None = None
    asked: dict[str, Any] = field(default_factory=dict)
    reported: float | None = None  # lm-eval's aggregate of metric,filter when known
    source: str | None = None  # the sample log written or read

    @property
    def n(self) -> int:
        return len(self.correct)

    @property
    def accuracy(self) -> float:
        """The fraction of questions right (nan with no questions)."""
        return sum(self.correct.values()) / self.n if self.correct else float("nan")

    @property
    def metric_key(self) -> str:
        """lm-eval's name of the number: `metric,filter` (e.g. "acc,none")."""
        return f"{self.metric},{self.filter}"


def question_id(doc_id: int, doc_hash: str) -> str:
    """The stable id of a question: lm-eval's doc_id and the first ID_HASH_CHARS hex of its doc_hash."""
    return f"{doc_id}:{doc_hash[:ID_HASH_CHARS]}"


# ------------------------------------------------------------------------------------------ the metric


def metric_spec(metric: object) -> tuple[str, str | None] | None:
    """(name, filter or None) of a metric asked for as "name" or "name,filter"; None for None; ValueError
    otherwise."""
    if metric is None:
        return None
    if not isinstance(metric, str) or not metric.strip() or metric.count(",") > 1:
        raise ValueError(f"metric must be a metric name or lm-eval's 'metric,filter' (e.g. 'acc', "
                         f"'exact_match,strict-match'), got {metric!r}")
    name, _, filt = metric.strip().partition(",")
    if not name.strip() or (_ and not filt.strip()):
        raise ValueError(f"metric must be a metric name or lm-eval's 'metric,filter', got {metric!r}")
    return name.strip(), filt.strip() or None


def plain_value(value: object) -> object:
    """numpy scalars (np.float64, np.bool_) as Python ones; the rest as is."""
    item = getattr(value, "item", None)
    return item() if callable(item) and type(value).__module__ == "numpy" else value


def _binary(value: object) -> bool:
    value = plain_value(value)
    return isinstance(value, (bool, int, float)) and value in (0, 1)


def choose_metric(samples: list[dict], metric: str | None = None, task: str = "task") -> tuple[str, str]:
    """(metric, filter) to judge `samples` (lm-eval sample dicts) by: `metric` ("name" or "name,filter")
    when given, else the first metric listed whose value is 0 or 1 on every sample of the first filter that
    has one (module docstring). ValueError naming `task` otherwise."""
    spec = metric_spec(metric)
    filters: dict[str, list[dict]] = {}
    for sample in samples:
        filters.setdefault(str(sample.get("filter", "none")), []).append(sample)
    if not filters:
        raise ValueError(f"task {task}: no samples")

    def listed(group: list[dict]) -> list[str]:
        names = group[0].get("metrics")
        if isinstance(names, list) and names:
            return [str(n) for n in names]
        return [k for k, v in group[0].items() if _binary(v) and k != "doc_id"]  # an older log: guess

    def is_binary(name: str, group: list[dict]) -> bool:
        return all(_binary(s.get(name)) for s in group)

    if spec is not None:
        name, filt = spec
        order = [filt] if filt else list(filters)
        for f in order:
            group = filters.get(f)
            if group and all(name in s for s in group):
                if not is_binary(name, group):
                    raise ValueError(f"task {task}: metric {name!r} (filter {f!r}) is not 0 or 1 on every question; "
                                     f"glmcheck judges question by question")
                return name, f
        have = sorted({f"{n},{f}" for f, group in filters.items() for n in listed(group)})
        raise ValueError(f"task {task}: no metric {metric!r} in its samples; they have {', '.join(have)}")
    for f, group in filters.items():
        for name in listed(group):
            if is_binary(name, group):
                return name, f
    have = sorted({f"{n},{f}" for f, group in filters.items() for n in listed(group)})
    raise ValueError(f"task {task}: no metric is 0 or 1 on every question ({', '.join(have) or 'none'}); "
                     f"glmcheck judges task accuracy question by question")


def build_task_samples(task: str, samples: list[dict], metric: str, filt: str, version: str | None, asked: dict,
                       reported: float | None, source: str | None, where: str | None = None) -> TaskSamples:
    """The TaskSamples of lm-eval sample dicts judged by `metric` under filter `filt` (samples of other filters
    skipped), ordered by doc_id. ValueError naming `where` (default: the task) for a sample without an int
    doc_id and a doc_hash, a question twice, or a value that is not 0 or 1."""
    where = where or f"task {task}"
    correct: dict[str, bool] = {}
    for sample in samples:
        if str(sample.get("filter", "none")) != filt:
            continue
        doc_id, doc_hash = sample.get("doc_id"), sample.get("doc_hash")
        if isinstance(doc_id, bool) or not isinstance(doc_id, int) or not isinstance(doc_hash, str) or not doc_hash:
            raise ValueError(f"{where}: a sample without an int doc_id and a doc_hash (got doc_id {doc_id!r})")
        key = question_id(doc_id, doc_hash)
        if key in correct:
            raise ValueError(f"{where}: question {key} appears twice under filter {filt!r}")
        value = sample.get(metric)
        if not _binary(value):
            raise ValueError(f"{where}: question {key} has {metric} = {value!r}, not 0 or 1")
        correct[key] = bool(plain_value(value) == 1)
    ordered = dict(sorted(correct.items(), key=lambda kv: int(kv[0].split(":", 1)[0])))
    return TaskSamples(task, metric, filt, ordered, version, asked, reported, source)


# ------------------------------------------------------------------------------------------ the run


def task_settings(results: dict, task: str) -> dict:
    """What lm-eval's `results` say `task` was run with: num_fewshot, task_version, output_type (None when
    not said)."""
    config = results.get("configs", {}).get(task, {})
    return {"num_fewshot": results.get("n-shot", {}).get(task), "task_version": results.get("versions", {}).get(task),
            "output_type": config.get("output_type") if isinstance(config, dict) else None}


def task_hash(samples: list[dict]) -> str:
    """lm-eval's task hash (as its EvaluationTracker computes it): sha256 over the samples' doc, prompt and
    target hashes in order: the same for two runs that asked the same questions the same way."""
    joined = "".join(str(s.get("doc_hash", "")) + str(s.get("prompt_hash", "")) + str(s.get("target_hash", ""))
                     for s in samples)
    return hashlib.sha256(joined.encode("utf-8")).hexdigest()


def reported_value(task_results: dict, metric: str, filt: str) -> float | None:
    """lm-eval's aggregate `metric,filt` in one task's results, as a float; None when absent or not a number."""
    value = task_results.get(f"{metric},{filt}") if isinstance(task_results, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
