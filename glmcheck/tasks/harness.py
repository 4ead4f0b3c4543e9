"""lm-evaluation-harness against a running server: per-question correctness of benchmark tasks.

`run_tasks(url, tasks, tokenizer=DIR)` runs lm-eval **as a library** (`lm_eval.evaluator.simple_evaluate`)
with its `local-completions` model against the server's OpenAI `/v1/completions` (vLLM, SGLang,
`glmcheck serve`): requests are token ids encoded by the local tokenizer directory (the checkpoint's, loaded
by lm-eval's Hugging Face tokenizer backend), `batch_size` prompts a request, `concurrency` requests in
flight, samples logged. It returns one `TaskSamples` per task lm-eval ran (a group gives its subtasks;
`glmcheck.tasks.samples` says what one holds and how its per-question metric is chosen). With `output_dir`
it writes the sample logs in lm-eval's own layout (`glmcheck.tasks.sample_logs`, whose `read_samples` reads
them back, or lm-eval's own).

**Our own task.** `glmcheck_heldout_mc` (`glmcheck.tasks.heldout_mc`: multiple choice over the trained
models' corpus's held-out text, the committed `glmcheck/data/resources/prompts/heldout_mc.jsonl`) is written for
each run into a temporary include directory (`TaskManager(include_path=...)`), its JSONL by absolute path, so it
runs from any working directory and without the network. When every task asked is ours, lm-eval's ~14 000
built-in task configs are not indexed (that takes 10-25 s); a name that no built-in task config mentions is
refused before indexing.

Errors are one-line ValueErrors naming the argument or endpoint: a bad argument, an unreachable server or
one that does not serve `model` (`glmcheck.sources.endpoint.describe`), a task lm-eval does not know, a
tokenizer directory without tokenizer files, lm-eval failing (with the server's own error message when it
gave one). lm-eval is imported on first use (the optional extra `glmcheck[tasks]`: lm-eval with its `api`
extra, which local-completions needs); while it runs, its logging and progress bars are captured or silenced
and torch's slow environment report is skipped (`glmcheck.tasks.lm_eval_quiet`).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from glmcheck.sources.transport import one_line
from glmcheck.tasks import heldout_mc
from glmcheck.tasks.lm_eval_quiet import ENV_NOT_COLLECTED, light_env_info, lm_eval_failure, lm_eval_logging
from glmcheck.tasks.sample_logs import SAMPLES_FILE, read_samples, write_sample_logs
from glmcheck.tasks.samples import (
    ID_HASH_CHARS,
    TaskSamples,
    build_task_samples,
    choose_metric,
    metric_spec,
    question_id,
    reported_value,
    task_hash,
    task_settings,
)

__all__ = [
    "API_PACKAGES",
    "DEFAULT_MAX_LENGTH",
    "ENV_NOT_COLLECTED",
    "ID_HASH_CHARS",
    "LM_EVAL_MISSING",
    "LM_EVAL_MODEL",
    "OWN_TASKS",
    "SAMPLES_FILE",
    "TOKENIZER_FILES",
    "TaskSamples",
    "choose_metric",
    "question_id",
    "read_samples",
    "run_tasks",
    "write_own_task_folders",
    "write_sample_logs",
]

LM_EVAL_MISSING = "glmcheck tasks needs lm-evaluation-harness: pip install 'glmcheck[tasks]'"
LM_EVAL_MODEL = "local-completions"
OWN_TASKS = {heldout_mc.TASK_NAME: heldout_mc}  # tasks glmcheck defines, by name
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")  # as glmcheck.data.model_tokenizer
DEFAULT_MAX_LENGTH = 2048  # lm-eval's, when the server does not say its max_model_len


def write_own_task_folders(directory: str | os.PathLike) -> list[Path]:
    """Write every task glmcheck defines into `directory` for lm-eval's own `--include_path` (each task's YAML
    with its data beside it: `heldout_mc.write_task_folder`); returns the YAML paths."""
    return [task.write_task_folder(directory) for task in OWN_TASKS.values()]


# ------------------------------------------------------------------------------------------ arguments


def _positive(name: str, value: object, *, none_ok: bool = False) -> None:
    if value is None and none_ok:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1{' or None' if none_ok else ''}, got {value!r}")


def _task_names(tasks: object) -> list[str]:
    if isinstance(tasks, str) or not isinstance(tasks, Sequence) or not tasks:
        raise ValueError(f"tasks must be a non-empty list of task names (e.g. [{heldout_mc.TASK_NAME!r}]), "
                         f"got {tasks!r}")
    names = []
    for task in tasks:
        if not isinstance(task, str) or not task.strip():
            raise ValueError(f"tasks must hold non-empty task names, got {task!r}")
        if task.strip() in names:
            raise ValueError(f"tasks: {task.strip()!r} is given twice")
        names.append(task.strip())
    return names


def _tokenizer_dir(tokenizer: object) -> Path:
    if not isinstance(tokenizer, (str, os.PathLike)) or not str(tokenizer):
        raise ValueError(f"tokenizer must be a local tokenizer directory (the checkpoint's), got {tokenizer!r}")
    path = Path(tokenizer).expanduser().resolve()
    if not path.is_dir():
        raise ValueError(f"tokenizer {str(tokenizer)!r} is not a directory; give the checkpoint's folder that holds "
                         f"its tokenizer files ({', '.join(TOKENIZER_FILES)})")
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise ValueError(f"tokenizer {str(tokenizer)!r} holds no tokenizer files (none of "
                         f"{', '.join(TOKENIZER_FILES)}); give the checkpoint's folder that has them")
    return path


def _load_tokenizer(path: Path, given: object) -> None:
    """The tokenizer loads (as lm-eval will load it); a one-line ValueError naming it otherwise."""
    try:
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except Exception as err:  # noqa: BLE001 - tokenizers raises its own base Exception for a broken file
        raise ValueError(f"tokenizer {str(given)!r} does not load: {one_line(err, 200)}") from None


def _endpoint(url: object, model: str | None):
    """The Endpoint of `url` (http[s]://HOST[:PORT][/PATH], a trailing /v1 dropped; NAME=URL also taken)."""
    from glmcheck.sources.endpoint import parse_endpoint

    if not isinstance(url, str) or not url.strip():
        raise ValueError(f"url must be a server's base URL such as http://127.0.0.1:8000, got {url!r}")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise ValueError(f"model must be a served model name or None (the server's only model), got {model!r}")
    text = url.strip()
    named = "=" in text.split("://", 1)[0]
    spec = text if named else f"server={text}"
    try:
        endpoint = parse_endpoint(spec, option="url")
    except ValueError as err:
        raise ValueError(f"url {url!r}{str(err).removeprefix(f'url {spec!r}')}") from None
    if endpoint.protocol != "openai":
        raise ValueError(f"url {url!r}: lm-eval's local-completions speaks OpenAI /v1/completions; give the plain "
                         f"http:// URL (SGLang serves /v1/completions too)")
    if model is not None:
        endpoint = replace(endpoint, model=model.strip())
    return endpoint


API_PACKAGES = ("aiohttp", "requests", "tenacity")  # lm-eval's `api` extra: what local-completions imports


def _import_lm_eval():
    """lm_eval, with what its local-completions needs; ValueError LM_EVAL_MISSING (+ what lacks) otherwise."""
    from importlib.util import find_spec

    try:
        import lm_eval
        import lm_eval.evaluator
        import lm_eval.tasks
    except ImportError as err:
        raise ValueError(f"{LM_EVAL_MISSING} ({one_line(err, 120)})") from None
    missing = [name for name in API_PACKAGES if find_spec(name) is None]
    if missing:
        raise ValueError(f"{LM_EVAL_MISSING} (lm-eval's api extra is missing: {', '.join(missing)})")
    return lm_eval


# ------------------------------------------------------------------------------------------ running


def _mentioned_by_builtin(lm_eval, names: Iterable[str]) -> set[str]:
    """The names some built-in task YAML of lm-eval mentions at all (a task, group or tag lm-eval
    indexes is named in one of them: a name none mentions is unknown, without indexing ~14 000 configs)."""
    root = Path(lm_eval.tasks.__file__).parent
    left = {name: name.encode() for name in names}
    found: set[str] = set()
    for path in root.rglob("*.yaml"):
        if not left:
            break
        try:
            text = path.read_bytes()
        except OSError:
            continue
        for name, raw in list(left.items()):
            if raw in text:
                found.add(name)
                del left[name]
    return found


def _task_manager(lm_eval, names: list[str], include: Path, metadata: dict):
    """lm-eval's TaskManager over our include directory, plus the built-in tasks when a name is not ours;
    ValueError naming a task lm-eval does not know."""
    from lm_eval.tasks import TaskManager

    foreign = [n for n in names if n not in OWN_TASKS and not Path(n).is_file()]
    version = lm_eval.__version__
    if foreign:
        mentioned = _mentioned_by_builtin(lm_eval, foreign)
        for name in foreign:
            if name not in mentioned:
                raise ValueError(f"tasks: lm-eval {version} knows no task, group or tag {name!r} (glmcheck's own: "
                                 f"{', '.join(OWN_TASKS)})")
    manager = TaskManager(include_path=str(include), include_defaults=bool(foreign), metadata=metadata)
    for name in foreign:
        if name not in manager.all_tasks:
            raise ValueError(f"tasks: lm-eval {version} knows no task, group or tag {name!r} (glmcheck's own: "
                             f"{', '.join(OWN_TASKS)})")
    return manager


def run_tasks(url: str, tasks: list[str], *, model: str | None = None, tokenizer: str | os.PathLike,
              limit: int | None = None, batch_size: int = 8, concurrency: int = 4,
              output_dir: str | os.PathLike | None = None, quiet: bool = True,
              metric: str | None = None) -> dict[str, TaskSamples]:
    """Run lm-eval's `tasks` against the server at `url` (module docstring); {task: TaskSamples}.

    `model`: the served model to ask for (None: the server's only one, from GET /v1/models);
    `tokenizer`: the checkpoint's local tokenizer directory; `limit`: the first N documents of each task;
    `batch_size`: prompts a request; `concurrency`: requests in flight; `output_dir`: where the sample logs
    go (none written when None); `quiet`: silence lm-eval; `metric`: "name" or "name,filter" to judge by
    instead of each task's primary metric."""
    names = _task_names(tasks)
    _positive("limit", limit, none_ok=True)
    _positive("batch_size", batch_size)
    _positive("concurrency", concurrency)
    tokenizer_dir = _tokenizer_dir(tokenizer)
    metric_spec(metric)
    endpoint = _endpoint(url, model)
    out = Path(output_dir) if output_dir is not None else None
    if out is not None and out.exists() and not out.is_dir():
        raise ValueError(f"output_dir {str(output_dir)!r} exists and is not a directory")
    lm_eval = _import_lm_eval()
    _load_tokenizer(tokenizer_dir, tokenizer)

    from glmcheck.sources.endpoint import describe

    info = describe(endpoint)  # EndpointError (a ValueError, one line) when unreachable or the model is not served
    where = f"endpoint {endpoint.url}"
    model_args = {"base_url": f"{endpoint.url}/v1/completions", "model": info.model, "tokenizer": str(tokenizer_dir),
                  "tokenizer_backend": "huggingface", "tokenized_requests": True, "num_concurrent": concurrency,
                  "max_length": info.max_model_len or DEFAULT_MAX_LENGTH, "max_retries": 3}
    with tempfile.TemporaryDirectory(prefix="glmcheck-tasks-") as scratch:
        include = Path(scratch) / "tasks"
        for name in names:
            if name in OWN_TASKS:
                OWN_TASKS[name].write_task_yaml(include, cache_dir=Path(scratch) / "datasets")
        include.mkdir(exist_ok=True)
        with lm_eval_logging(quiet) as captured:
            manager = _task_manager(lm_eval, names, include, dict(model_args))
            try:
                with light_env_info(lm_eval):
                    results = lm_eval.evaluator.simple_evaluate(
                        model=LM_EVAL_MODEL, model_args=model_args, tasks=names, batch_size=batch_size, limit=limit,
                        log_samples=True, task_manager=manager, bootstrap_iters=0)
            except Exception as err:  # noqa: BLE001 - lm-eval raises anything: one line naming the endpoint
                raise lm_eval_failure(err, captured, where) from None
    if not results or not results.get("samples"):
        raise ValueError(f"{where}: lm-eval returned no samples for {', '.join(names)}")
    version = results.get("lm_eval_version") or lm_eval.__version__
    base = {"url": endpoint.url, "model": info.model, "tokenizer": str(tokenizer_dir), "limit": limit,
            "batch_size": batch_size, "concurrency": concurrency, "lm_eval_model": LM_EVAL_MODEL,
            "server": info.to_record()}
    found: dict[str, TaskSamples] = {}
    chosen: dict[str, dict] = {}
    refused: list[ValueError] = []
    for task, samples in results["samples"].items():
        asked = {**base, **task_settings(results, task), "task_hash": task_hash(samples)}
        try:
            name, filt = choose_metric(samples, metric, task)
            found[task] = build_task_samples(task, samples, name, filt, version, asked,
                                             reported_value(results.get("results", {}).get(task, {}), name, filt),
                                             None)
        except ValueError as err:  # a metric the task does not have: bad usage, nothing written
            refused.append(err)
            continue
        chosen[task] = {"metric": name, "filter": filt, "asked": asked}
    if refused:
        raise ValueError(f"{where}: {refused[0]}" + (f" (and {len(refused) - 1} more tasks)" if len(refused) > 1
                                                     else ""))
    if out is not None:
        paths = write_sample_logs(out, results, chosen)
        found = {task: _with_source(found[task], paths[task]) for task in found}
    return found


def _with_source(samples: TaskSamples, path: Path) -> TaskSamples:
    return replace(samples, source=str(path))
