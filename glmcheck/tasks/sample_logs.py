"""lm-eval's sample logs: written in lm-eval's own layout (`write_sample_logs`) and read back, ours or
lm-eval's own (`read_samples`).

With `output_dir`, each `glmcheck.tasks.harness.run_tasks` writes lm-eval's own layout there, as `lm_eval
--output_path DIR/results.json --log_samples` would: `results_<date>.json` (lm-eval's results without the
samples, plus a `glmcheck` entry: URL, model, tokenizer, server, the metric and filter chosen per task) and one
`samples_<task>_<date>.jsonl` per task (lm-eval's lines, sanitised as lm-eval writes them). Files are written
atomically. `read_samples(path)` reads such a samples file, or one that lm-eval wrote itself (`lm_eval ...
--output_path DIR --log_samples`), taking the version and settings from the `results_<date>.json` beside it
when there is one; the metric rule (`glmcheck.tasks.samples`) is the same, so both give the same `TaskSamples`
for one run.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from glmcheck.sources.transport import one_line
from glmcheck.tasks.samples import (
    TaskSamples,
    build_task_samples,
    choose_metric,
    plain_value,
    reported_value,
    task_hash,
    task_settings,
)

SAMPLES_FILE = re.compile(r"^samples_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[0-9.\-]+)\.jsonl$")


def _json_default(value: Any) -> Any:
    """lm-eval's fallback for what JSON cannot hold (numpy numbers, sets, the rest as text)."""
    plain = plain_value(value)
    if plain is not value:
        return plain
    if isinstance(value, set):
        return sorted(value, key=str)
    return str(value)


def _stringify(value: Any) -> Any:
    """lm-eval's `sanitize_list`: nested lists and tuples kept, every leaf as text."""
    if isinstance(value, (list, tuple)):
        return [_stringify(v) for v in value]
    return str(value)


def _log_line(sample: dict) -> str:
    """One line of lm-eval's samples_<task>_<date>.jsonl (as its EvaluationTracker writes it)."""
    line = dict(sample)
    line["arguments"] = {f"gen_args_{i}": {f"arg_{j}": arg for j, arg in enumerate(args)}
                         for i, args in enumerate(sample.get("arguments", []))}
    line["resps"] = _stringify(sample.get("resps", []))
    line["filtered_resps"] = _stringify(sample.get("filtered_resps", []))
    line["target"] = str(sample.get("target"))
    return json.dumps(line, default=_json_default, ensure_ascii=False) + "\n"


def _write_atomic(path: Path, text: str) -> None:
    temp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(temp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(temp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()


def write_sample_logs(directory: str | os.PathLike, results: dict, chosen: dict[str, dict]) -> dict[str, Path]:
    """Write lm-eval's `results` (from simple_evaluate with log_samples) into `directory` in lm-eval's own
    layout (module docstring), with `chosen` ({task: {"metric", "filter", "asked"}}) as the results' `glmcheck`
    entry; returns {task: samples file}."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"output_dir {str(directory)!r} cannot be created: {one_line(err, 200)}") from None
    date = datetime.now().isoformat().replace(":", "-")  # noqa: DTZ005  (local time, as lm-eval names its files)
    summary = {k: v for k, v in results.items() if k != "samples"}
    summary["task_hashes"] = {task: task_hash(samples) for task, samples in results["samples"].items()}
    summary["glmcheck"] = {"tasks": chosen}
    paths = {}
    try:
        _write_atomic(directory / f"results_{date}.json",
                      json.dumps(summary, indent=2, default=_json_default, ensure_ascii=False))
        for task, samples in results["samples"].items():
            paths[task] = directory / f"samples_{task}_{date}.jsonl"
            _write_atomic(paths[task], "".join(_log_line(s) for s in samples))
    except OSError as err:
        raise ValueError(f"output_dir {str(directory)!r}: cannot write the sample logs: {one_line(err, 200)}") \
            from None
    return paths


def _samples_file(path: Path) -> Path:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.name.startswith("samples_") and p.suffix == ".jsonl")
        if len(files) != 1:
            listed = ", ".join(p.name for p in files[:5]) + (", ..." if len(files) > 5 else "")
            raise ValueError(f"path {str(path)!r} is a directory with {len(files)} samples_*.jsonl files"
                             f"{' (' + listed + ')' if files else ''}; name one file")
        return files[0]
    if not path.is_file():
        raise ValueError(f"path {str(path)!r} does not exist; expected an lm-eval samples_<task>_<date>.jsonl file")
    return path


def read_samples(path: str | os.PathLike, *, metric: str | None = None) -> TaskSamples:
    """The TaskSamples of an lm-eval sample log (ours or lm-eval's own `--log_samples` file; module
    docstring). The task comes from the file name; version, settings and glmcheck's metric choice from the
    `results_<date>.json` beside it when there is one; `metric` overrides the choice. ValueError (one line,
    naming the file) when it cannot be read or holds no 0/1 metric."""
    file = _samples_file(Path(path))
    where = f"samples file {str(file)!r}"
    match = SAMPLES_FILE.match(file.name)
    task = match["task"] if match else file.stem.removeprefix("samples_")
    samples = []
    try:
        with open(file, encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    sample = json.loads(line)
                except ValueError as err:
                    raise ValueError(f"{where} line {number}: not JSON ({one_line(err, 100)})") from None
                if not isinstance(sample, dict):
                    raise ValueError(  # bad data in a file, not a bad argument
                        f"{where} line {number}: expected a JSON object (an lm-eval sample)")
                samples.append(sample)
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{where}: cannot be read ({one_line(err, 200)})") from None
    if not samples:
        raise ValueError(f"{where}: holds no samples")
    summary = _results_beside(file, match["date"] if match else None)
    own = (summary.get("glmcheck", {}).get("tasks", {}) or {}).get(task, {}) if summary else {}
    if metric is None and own.get("metric") and own.get("filter"):
        metric = f"{own['metric']},{own['filter']}"
    try:
        name, filt = choose_metric(samples, metric, task)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
    version = summary.get("lm_eval_version") if summary else None
    asked = dict(own.get("asked") or {})
    if summary and not asked:
        config = summary.get("config") if isinstance(summary.get("config"), dict) else {}
        asked = {"model_args": config.get("model_args"), "limit": config.get("limit"),
                 **task_settings(summary, task)}
    asked.setdefault("task_hash", task_hash(samples))
    reported = reported_value(summary.get("results", {}).get(task, {}), name, filt) if summary else None
    return build_task_samples(task, samples, name, filt, version, asked, reported, str(file), where)


def _results_beside(file: Path, date: str | None) -> dict:
    """The results_<date>.json written with a samples file (lm-eval's layout), else {}."""
    if date is None:
        return {}
    results = file.with_name(f"results_{date}.json")
    if not results.is_file():
        return {}
    try:
        summary = json.loads(results.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return summary if isinstance(summary, dict) else {}
