"""`glmcheck_heldout_mc`: a multiple-choice task over the trained models' corpus's held-out text, for
lm-evaluation-harness (`glmcheck.tasks.harness.run_tasks`).

A question is a stretch of held-out text cut inside a line: the 4 lines before it and the line's
first words are the context; the choices are the rest of that line (the answer) and the rests of 3
other lines of the held-out text of about the same length (distractors). A model that has learned
the corpus's language scores well above chance (25 %); the trained models never saw
these documents (`glmcheck.data.heldout`). lm-eval scores each choice by its log-likelihood after
the context (`output_type: multiple_choice`, metric `acc`): one 0/1 per question. ref-cpu gets 242 of the 400
right (60.5 %; the first 100: 61 %; pydoc topics 74 %, library code 50 %, codec tables 92 %), measured through
`glmcheck serve --model ref-cpu --backend reference` with lm-eval 0.4.13.

Generation is deterministic (`generate(count, seed)`, seeded `random.Random`, no tokenizer): the
committed `glmcheck/data/resources/prompts/heldout_mc.jsonl` is `generate()` written by `dumps`, so a task run
never generates anything; `tests/test_task_harness.py` regenerates it and checks it is identical.

- Documents are visited in corpus order, round robin; each gives its lines in a seeded order. A
  line is usable when it can be cut before its k-th word (k >= 1 counting its non-empty words) with
  3 to 8 non-empty words and 16 to 48 characters after the cut (ref-cpu's tokenizer:
  median 11 tokens, 90 % of them 5 to 20); the cut is drawn among those.
  A line whose (context line, continuation) was used already (the four codec tables share many
  lines) is skipped; a document with no usable line left drops out of the rotation.
- The text is reassembled exactly: the line is split on single spaces, so context + " " + answer
  is the original line (lm-eval puts `target_delimiter` " " between the context and a choice).
- Distractors: the answers of other questions whose length is within max(4, 25 %) characters of
  the answer's and whose text differs from it and from each other (3 drawn by the seed; fewer
  candidates than 3: the nearest lengths). The answer's position among the 4 is drawn by the seed.

A record: {"id": "heldout-mc-001", "source": document name, "context": str, "choices": [4 str],
"answer": index of the true continuation}. The lm-eval task (`task_config`, `write_task_yaml`)
reads the JSONL by its absolute path (`dataset_path: json`, `data_files`), so it works from any
working directory. For lm-eval's own CLI (`--include_path DIR`), `write_task_folder(DIR)` copies the questions
into DIR beside the YAML and names that copy, so the folder depends on no path of the glmcheck installation
(`glmcheck tasks --write-yaml DIR`).
"""

from __future__ import annotations

import json
import random
import shutil
from importlib.resources import files
from pathlib import Path

TASK_NAME = "glmcheck_heldout_mc"
TASK_VERSION = 1.0
QUESTIONS = 400
SEED = 2026
CHOICES = 4
CONTEXT_LINES = 4
MIN_WORDS, MAX_WORDS = 3, 8  # non-empty words after the cut
MIN_CHARS, MAX_CHARS = 16, 48  # characters after the cut (about 3 characters a token)
JSONL_FILE = Path(str(files("glmcheck") / "data" / "resources" / "prompts" / "heldout_mc.jsonl"))  # package data


def _cuts(line: str) -> list[int]:
    """The word positions k at which `line.split(" ")` may be cut (words[:k] | words[k:])."""
    words = line.split(" ")
    filled = [i for i, word in enumerate(words) if word]
    cuts = []
    for n, k in enumerate(filled[1:], 1):  # at least one non-empty word stays in the context
        rest = " ".join(words[k:]).rstrip()
        if MIN_WORDS <= len(filled) - n <= MAX_WORDS and MIN_CHARS <= len(rest) <= MAX_CHARS:
            cuts.append(k)
    return cuts


def _sites(documents, rng: random.Random, count: int) -> list[dict]:
    """`count` (source, context, answer) sites, documents round robin (module docstring)."""
    orders = []
    for doc in documents:
        lines = doc.text.split("\n")
        usable = [i for i, line in enumerate(lines) if _cuts(line)]
        rng.shuffle(usable)
        orders.append((doc, lines, usable))
    sites: list[dict] = []
    seen: set[tuple[str, str]] = set()
    while len(sites) < count:
        progressed = False
        for doc, lines, usable in orders:
            while usable and len(sites) < count:
                i = usable.pop()
                cuts = _cuts(lines[i])
                k = cuts[rng.randrange(len(cuts))]
                words = lines[i].split(" ")
                head, answer = " ".join(words[:k]), " ".join(words[k:]).rstrip()
                if (head, answer) in seen:
                    continue
                seen.add((head, answer))
                context = "\n".join(lines[max(0, i - CONTEXT_LINES):i] + [head]).lstrip("\n")
                sites.append({"source": doc.name, "context": context, "answer": answer})
                progressed = True
                break
        if not progressed:
            raise ValueError(f"the held-out corpus has only {len(sites)} usable lines; asked for {count} questions")
    return sites


def _distractors(answers: list[str], q: int, rng: random.Random) -> list[str]:
    """CHOICES - 1 other answers of about the length of answers[q] (module docstring)."""
    answer = answers[q]
    slack = max(4, len(answer) // 4)
    others = sorted({a for i, a in enumerate(answers) if i != q and a != answer})
    near = [a for a in others if abs(len(a) - len(answer)) <= slack]
    if len(near) >= CHOICES - 1:
        return rng.sample(near, CHOICES - 1)
    return sorted(others, key=lambda a: (abs(len(a) - len(answer)), a))[:CHOICES - 1]


def generate(count: int = QUESTIONS, seed: int = SEED) -> list[dict]:
    """The task's questions (module docstring), a pure function of the held-out corpus and `seed`."""
    from glmcheck.data.heldout import heldout_documents

    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be a positive int, got {count!r}")
    rng = random.Random(seed)
    sites = _sites(heldout_documents(), rng, count)
    answers = [site["answer"] for site in sites]
    records = []
    for q, site in enumerate(sites):
        choices = _distractors(answers, q, rng)
        gold = rng.randrange(CHOICES)
        choices.insert(gold, site["answer"])
        records.append({"id": f"heldout-mc-{q + 1:03d}", "source": site["source"], "context": site["context"],
                        "choices": choices, "answer": gold})
    return records


def dumps(records: list[dict]) -> str:
    """The JSONL text of `records` (one object a line, UTF-8 as is, keys in record order)."""
    return "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)


def write_jsonl(path: str | Path = JSONL_FILE, count: int = QUESTIONS, seed: int = SEED) -> Path:
    """Write `generate(count, seed)` to `path` (the committed file by default); returns the path."""
    path = Path(path)
    path.write_text(dumps(generate(count, seed)), encoding="utf-8")
    return path


def task_config(data_file: str | Path = JSONL_FILE, cache_dir: str | Path | None = None) -> dict:
    """The lm-eval task config (what the YAML holds): `data_file` by its absolute path; `cache_dir`
    (when given) is where `datasets` builds the table, instead of the user's Hugging Face cache."""
    data_file = Path(data_file).resolve()
    if not data_file.is_file():
        raise ValueError(f"task {TASK_NAME}: its questions file {str(data_file)!r} does not exist (it ships in the "
                         f"glmcheck package's prompts/; regenerate it with glmcheck.tasks.heldout_mc.write_jsonl())")
    dataset_kwargs: dict = {"data_files": {"test": str(data_file)}}
    if cache_dir is not None:
        dataset_kwargs["cache_dir"] = str(Path(cache_dir).resolve())
    return {
        "task": TASK_NAME,
        "dataset_path": "json",
        "dataset_name": None,
        "dataset_kwargs": dataset_kwargs,
        "test_split": "test",
        "output_type": "multiple_choice",
        "doc_to_text": "context",
        "doc_to_choice": "choices",
        "doc_to_target": "answer",
        "target_delimiter": " ",
        "num_fewshot": 0,
        "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}],
        "metadata": {"version": TASK_VERSION},
    }


def write_task_yaml(directory: str | Path, data_file: str | Path = JSONL_FILE,
                    cache_dir: str | Path | None = None) -> Path:
    """Write the task's YAML (`task_config`) into `directory` (created), for lm-eval's include path;
    returns the YAML's path."""
    import yaml

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{TASK_NAME}.yaml"
    path.write_text(yaml.safe_dump(task_config(data_file, cache_dir), sort_keys=False, allow_unicode=True),
                    encoding="utf-8")
    return path


def write_task_folder(directory: str | Path) -> Path:
    """Write the task for a user's own lm-eval command into `directory` (created): the questions copied there
    (`<TASK_NAME>.jsonl`) and the YAML naming that copy by its absolute path (datasets reads `data_files`
    relative to the working directory, not to the YAML), so nothing in the folder points into the glmcheck
    installation; a moved folder is written again. Returns the YAML's path."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise NotADirectoryError(f"--write-yaml: {str(directory)!r} exists and is not a directory")
    directory.mkdir(parents=True, exist_ok=True)
    questions = directory / f"{TASK_NAME}.jsonl"
    shutil.copyfile(JSONL_FILE, questions)
    return write_task_yaml(directory, data_file=questions)
