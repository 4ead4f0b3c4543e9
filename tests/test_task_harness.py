"""lm-evaluation-harness against a running server (issue 42, the harness part): `glmcheck.tasks.harness`
and our own task `glmcheck_heldout_mc` (`glmcheck.tasks.heldout_mc`).

The committed JSONL regenerates identically and lm-eval loads its YAML from any working directory; one real
`glmcheck serve` process of ref-cpu (reference backend) answers lm-eval's local-completions: ref-cpu scores
well above chance on the first questions, question ids are the same across runs (and in a log that lm-eval's
own EvaluationTracker wrote), sample logs read back to the same TaskSamples, a generation task is judged by
exact_match under its first filter, and every failure is a one-line ValueError. Question counts are small: the
server runs one forward per choice (~0.1 s each on a CPU core).
"""

from __future__ import annotations

import json
import shutil
import socket
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")

from glmcheck.model.trained import MODELS_DIR
from glmcheck.tasks import harness, heldout_mc, lm_eval_quiet
from glmcheck.tasks.harness import read_samples, run_tasks
from tests.support.servers import Servers

TASK = heldout_mc.TASK_NAME
TOKENIZER = MODELS_DIR / "ref-cpu"
LIMIT = 24  # questions of the accuracy run: ref-cpu gets 14 right (58 %); 60.5 % over all 400
FEW = 4  # questions of the second run (its ids are the first run's first FEW)


def one_line_error(excinfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message and message, message
    return message


@pytest.fixture(scope="module")
def server():
    running = Servers()
    try:
        running.start({"ref": "reference"})
        yield running.urls["ref"]
    finally:
        running.stop_all()


@pytest.fixture(scope="module")
def first_run(server, tmp_path_factory):
    out = tmp_path_factory.mktemp("first-run")
    start = time.perf_counter()
    found = run_tasks(server, [TASK], tokenizer=TOKENIZER, limit=LIMIT, output_dir=out)
    print(f"\n{TASK}: {LIMIT} questions in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return found[TASK]


# ------------------------------------------------------------------------------------------ the task


def test_heldout_mc_jsonl_regenerates_identically():
    records = heldout_mc.generate()
    assert heldout_mc.dumps(records) == heldout_mc.JSONL_FILE.read_text(encoding="utf-8")
    assert len(records) == heldout_mc.QUESTIONS == 400
    assert len({r["id"] for r in records}) == 400
    from glmcheck.data.heldout import heldout_documents

    texts = {doc.name: doc.text for doc in heldout_documents()}
    for record in records:
        choices, gold = record["choices"], record["answer"]
        assert len(choices) == 4 and len(set(choices)) == 4 and 0 <= gold < 4
        answer = choices[gold]
        # context + lm-eval's target delimiter + the answer is the held-out text itself, exactly
        assert record["context"] + " " + answer in texts[record["source"]]
        assert heldout_mc.MIN_CHARS <= len(answer) <= heldout_mc.MAX_CHARS
        assert all(abs(len(c) - len(answer)) <= max(4, len(answer) // 4) for c in choices)
    positions = [r["answer"] for r in records]
    assert all(60 <= positions.count(k) <= 140 for k in range(4))  # the seed spreads the answer's position


def test_task_yaml_loads_in_lm_eval_from_any_directory(tmp_path, monkeypatch):
    from lm_eval.tasks import TaskManager

    include = tmp_path / "include"
    yaml_path = heldout_mc.write_task_yaml(include, cache_dir=tmp_path / "datasets")
    assert "dataset_path: json" in yaml_path.read_text()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the JSONL is named by its absolute path
    task = TaskManager(include_path=str(include), include_defaults=False).load([TASK])["tasks"][TASK]
    docs = list(task.test_docs())
    first = json.loads(heldout_mc.JSONL_FILE.read_text(encoding="utf-8").splitlines()[0])
    assert len(docs) == 400 and task.OUTPUT_TYPE == "multiple_choice"
    assert task.doc_to_text(docs[0]) == first["context"]
    assert task.doc_to_choice(docs[0]) == first["choices"] and task.doc_to_target(docs[0]) == first["answer"]
    assert not list(elsewhere.iterdir())  # nothing written where it ran


def test_write_yaml_gives_a_folder_that_points_nowhere_into_glmcheck(tmp_path, monkeypatch, capsys):
    """`glmcheck tasks --write-yaml DIR`: the YAML and its questions in DIR, no path of the source tree or the
    installation in the YAML, and lm-eval's own loader reads the same 400 questions from another directory."""
    import datasets.config
    from lm_eval.tasks import TaskManager

    from glmcheck import cli

    folder = tmp_path / "my-tasks"
    assert cli.main(["tasks", "--write-yaml", str(folder)]) == 0
    printed = capsys.readouterr().out
    assert f"--include_path {folder}" in printed and f"--tasks {TASK}" in printed
    assert str(TOKENIZER) in printed  # --model ref-cpu (the default): its tokenizer folder
    # the batching glmcheck tasks uses (a request at a time otherwise: issue 73), and a record of every question
    assert "num_concurrent=4," in printed and "--batch_size 8 " in printed
    assert "--output_path OUT --log_samples" in printed
    assert cli.main(["tasks", "--write-yaml", str(folder), "--batch-size", "2", "--concurrency", "3"]) == 0
    again = capsys.readouterr().out
    assert "num_concurrent=3," in again and "--batch_size 2 " in again
    text = (folder / f"{TASK}.yaml").read_text()
    package = Path(heldout_mc.__file__).resolve().parents[1]
    for tree in (package, package.parent):  # the installed package and the checkout holding it
        assert str(tree) not in text.replace(str(tmp_path), "")
    assert str(folder / f"{TASK}.jsonl") in text
    assert (folder / f"{TASK}.jsonl").read_bytes() == heldout_mc.JSONL_FILE.read_bytes()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-datasets"))  # not the user's cache
    task = TaskManager(include_path=str(folder), include_defaults=False).load([TASK])["tasks"][TASK]
    docs = list(task.test_docs())
    first = json.loads(heldout_mc.JSONL_FILE.read_text(encoding="utf-8").splitlines()[0])
    assert len(docs) == 400 and task.doc_to_choice(docs[0]) == first["choices"]


@pytest.mark.parametrize("args, message", [
    (["--endpoint", "ref=http://127.0.0.1:1", "--tasks", TASK], "drop --endpoint, --tasks"),
    (["compare", "a", "b"], "drop compare"),
])
def test_write_yaml_with_run_options_is_one_line(tmp_path, args, message, capsys):
    from glmcheck import cli

    assert cli.main(["tasks", "--write-yaml", str(tmp_path / "t"), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not (tmp_path / "t").exists()


# ------------------------------------------------------------------------------------------ runs


def test_ref_cpu_scores_well_above_chance(first_run):
    import lm_eval

    assert (first_run.task, first_run.metric, first_run.filter) == (TASK, "acc", "none")
    assert first_run.n == LIMIT
    assert first_run.accuracy >= 0.45, first_run.accuracy  # chance is 0.25; measured 14 / 24
    assert first_run.reported == pytest.approx(first_run.accuracy)  # lm-eval's own mean
    assert first_run.lm_eval_version == lm_eval.__version__
    asked = first_run.asked
    assert asked["limit"] == LIMIT and asked["model"] == "ref-cpu" and asked["output_type"] == "multiple_choice"
    assert asked["server"]["glmcheck"]["backend"] == "reference" and asked["task_version"] == heldout_mc.TASK_VERSION
    ids = list(first_run.correct)
    assert [int(i.split(":")[0]) for i in ids] == list(range(LIMIT))
    assert all(len(i.split(":")[1]) == harness.ID_HASH_CHARS for i in ids)


def test_question_ids_are_stable_across_runs(server, first_run, capfd):
    again = run_tasks(server, [TASK], tokenizer=str(TOKENIZER), limit=FEW, batch_size=3, concurrency=2)[TASK]
    assert list(again.correct.items()) == list(first_run.correct.items())[:FEW]  # same ids, same answers
    assert again.source is None  # no output_dir: nothing written
    printed = capfd.readouterr()
    assert printed.out == "" and printed.err == ""  # quiet: no lm-eval logging, no progress bars


def test_read_samples_reads_back_what_was_written(first_run, tmp_path):
    source = Path(first_run.source)
    assert harness.SAMPLES_FILE.match(source.name) and source.name.startswith(f"samples_{TASK}_")
    assert read_samples(source) == first_run
    assert read_samples(source.parent) == first_run  # a folder with one samples file
    alone = tmp_path / source.name  # without the results file beside it: the same answers, less said
    shutil.copy(source, alone)
    bare = read_samples(alone)
    assert (bare.metric, bare.filter, bare.correct) == (first_run.metric, first_run.filter, first_run.correct)
    assert bare.lm_eval_version is None and bare.reported is None
    assert bare.asked["task_hash"] == first_run.asked["task_hash"]


def test_read_samples_reads_a_log_lm_eval_wrote_itself(server, first_run, tmp_path):
    import lm_eval
    import lm_eval.evaluator
    from lm_eval.loggers import EvaluationTracker
    from lm_eval.tasks import TaskManager

    heldout_mc.write_task_yaml(tmp_path / "tasks", cache_dir=tmp_path / "datasets")
    args = {"base_url": f"{server}/v1/completions", "model": "ref-cpu", "tokenizer": str(TOKENIZER),
            "tokenizer_backend": "huggingface", "tokenized_requests": True, "max_length": 4096}
    tracker = EvaluationTracker(output_path=str(tmp_path / "lm"))  # as lm-eval's CLI: --output_path DIR --log_samples
    with lm_eval_quiet.light_env_info(lm_eval), lm_eval_quiet.lm_eval_logging(quiet=True):
        results = lm_eval.evaluator.simple_evaluate(
            model="local-completions", model_args=args, tasks=[TASK], limit=4, log_samples=True, bootstrap_iters=0,
            task_manager=TaskManager(include_path=str(tmp_path / "tasks"), include_defaults=False),
            evaluation_tracker=tracker)
        samples = results.pop("samples")
        tracker.save_results_aggregated(results=results, samples=samples)
        tracker.save_results_samples(task_name=TASK, samples=samples[TASK])
    file = next((tmp_path / "lm").rglob("samples_*.jsonl"))
    theirs = read_samples(file)
    assert (theirs.task, theirs.metric, theirs.filter) == (TASK, "acc", "none")
    assert list(theirs.correct.items()) == list(first_run.correct.items())[:4]
    assert theirs.lm_eval_version == lm_eval.__version__ and theirs.reported == pytest.approx(theirs.accuracy)


def _generation_task(tmp_path: Path, **generation) -> Path:
    """A 3-question generate_until task file: the first word after a held-out context, two filters."""
    records = [json.loads(line) for line in heldout_mc.JSONL_FILE.read_text(encoding="utf-8").splitlines()[:3]]
    data = tmp_path / "gen.jsonl"
    data.write_text("".join(json.dumps({"context": r["context"], "word": r["choices"][r["answer"]].split()[0]}) + "\n"
                            for r in records), encoding="utf-8")
    config = {"task": "glmcheck_test_next_word", "dataset_path": "json",
              "dataset_kwargs": {"data_files": {"test": str(data)}, "cache_dir": str(tmp_path / "datasets")},
              "test_split": "test", "output_type": "generate_until", "doc_to_text": "context", "doc_to_target": "word",
              "generation_kwargs": {"until": ["\n"], "max_gen_toks": 3, "do_sample": False, **generation},
              "filter_list": [{"name": "first-word", "filter": [{"function": "regex", "regex_pattern": r"(\S+)"},
                                                                {"function": "take_first"}]},
                              {"name": "whole", "filter": [{"function": "take_first"}]}],
              "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True}]}
    path = tmp_path / "next_word.yaml"
    path.write_text(json.dumps(config), encoding="utf-8")  # JSON is YAML
    return path


def test_a_generation_task_is_judged_by_exact_match_under_its_first_filter(server, tmp_path):
    task = _generation_task(tmp_path, temperature=0.0)
    found = run_tasks(server, [str(task)], tokenizer=TOKENIZER, output_dir=tmp_path / "out")
    samples = found["glmcheck_test_next_word"]
    assert (samples.metric, samples.filter, samples.n) == ("exact_match", "first-word", 3)
    assert samples.reported == pytest.approx(samples.accuracy)
    assert read_samples(samples.source) == samples
    other = read_samples(samples.source, metric="exact_match,whole")
    assert (other.metric, other.filter, list(other.correct)) == ("exact_match", "whole", list(samples.correct))


# ------------------------------------------------------------------------------------------ errors


def test_lm_eval_failing_is_one_line_with_the_servers_message(server, tmp_path):
    task = _generation_task(tmp_path, temperature=0.7)  # glmcheck serve decodes greedily: HTTP 400
    with pytest.raises(ValueError) as excinfo:
        run_tasks(server, [str(task)], tokenizer=TOKENIZER, concurrency=1)
    message = one_line_error(excinfo)
    assert message.startswith(f"endpoint {server}: lm-eval failed: ") and "temperature" in message


def test_lm_eval_raising_anything_is_one_line(server, monkeypatch):
    import lm_eval.evaluator

    def boom(**kwargs):
        raise RuntimeError("first line\nsecond line")

    monkeypatch.setattr(lm_eval.evaluator, "simple_evaluate", boom)
    with pytest.raises(ValueError) as excinfo:
        run_tasks(server, [TASK], tokenizer=TOKENIZER)
    assert one_line_error(excinfo) == f"endpoint {server}: lm-eval failed: RuntimeError: first line second line"


def test_a_task_lm_eval_does_not_know_is_one_line(server):
    with pytest.raises(ValueError) as excinfo:
        run_tasks(server, ["no_such_task_glmcheck"], tokenizer=TOKENIZER)
    message = one_line_error(excinfo)
    assert message.startswith("tasks: lm-eval ") and "'no_such_task_glmcheck'" in message


def test_an_unreachable_server_is_one_line():
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ValueError) as excinfo:
        run_tasks(f"http://127.0.0.1:{port}", [TASK], tokenizer=TOKENIZER)
    assert f"http://127.0.0.1:{port}" in one_line_error(excinfo)


def test_a_model_the_server_does_not_serve_is_one_line(server):
    with pytest.raises(ValueError) as excinfo:
        run_tasks(server, [TASK], model="glm-5.2", tokenizer=TOKENIZER)
    message = one_line_error(excinfo)
    assert server in message and "'glm-5.2'" in message


def test_a_tokenizer_directory_without_tokenizer_files_is_one_line(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "tokenizer.json").write_text("not a tokenizer")
    for bad in (tmp_path, tmp_path / "missing", broken):
        with pytest.raises(ValueError) as excinfo:
            run_tasks("http://127.0.0.1:9", [TASK], tokenizer=bad)
        assert one_line_error(excinfo).startswith(f"tokenizer {str(bad)!r}")


@pytest.mark.parametrize(("kwargs", "start"), [
    ({"tasks": []}, "tasks must be"), ({"tasks": "glmcheck_heldout_mc"}, "tasks must be"),
    ({"tasks": [TASK, TASK]}, "tasks: "), ({"limit": 0}, "limit must be"), ({"batch_size": True}, "batch_size must"),
    ({"concurrency": 0}, "concurrency must"), ({"url": "ftp://127.0.0.1:9"}, "url 'ftp://127.0.0.1:9'"),
    ({"url": "sglang+http://127.0.0.1:9"}, "url 'sglang+http://127.0.0.1:9'"), ({"metric": ",none"}, "metric must"),
])
def test_bad_arguments_are_one_line(kwargs, start):
    call = {"url": "http://127.0.0.1:9", "tasks": [TASK], "tokenizer": TOKENIZER, **kwargs}
    with pytest.raises(ValueError) as excinfo:
        run_tasks(call.pop("url"), call.pop("tasks"), **call)
    assert one_line_error(excinfo).startswith(start)


@pytest.mark.parametrize("module", ["lm_eval", "tenacity"])  # lm-eval itself, or its api extra
def test_without_lm_eval_the_message_says_how_to_install(monkeypatch, module):
    monkeypatch.setitem(sys.modules, module, None)  # `import` and find_spec fail for it
    with pytest.raises(ValueError) as excinfo:
        run_tasks("http://127.0.0.1:9", [TASK], tokenizer=TOKENIZER)
    assert one_line_error(excinfo).startswith(harness.LM_EVAL_MISSING)


def test_the_metric_rule(tmp_path):
    def sample(doc_id, filt, **metrics):
        return {"doc_id": doc_id, "doc_hash": f"{doc_id:064x}", "filter": filt, "metrics": list(metrics), **metrics}

    mixed = [sample(0, "none", perplexity=3.2, acc=1.0, acc_norm=0.0), sample(1, "none", perplexity=2.0, acc=0.0,
                                                                              acc_norm=1.0)]
    assert harness.choose_metric(mixed) == ("acc", "none")  # the first 0/1 metric in lm-eval's order
    assert harness.choose_metric(mixed, "acc_norm") == ("acc_norm", "none")
    with pytest.raises(ValueError, match="not 0 or 1"):
        harness.choose_metric(mixed, "perplexity", "t")
    with pytest.raises(ValueError, match="no metric 'bleu'"):
        harness.choose_metric(mixed, "bleu", "t")
    with pytest.raises(ValueError, match="no metric is 0 or 1"):
        harness.choose_metric([sample(0, "none", bleu=0.3)], None, "t")
    log = tmp_path / "samples_t_2026-01-01T00-00-00.000000.jsonl"
    log.write_text("".join(json.dumps(s) + "\n" for s in mixed) + "not json\n")
    with pytest.raises(ValueError) as excinfo:
        read_samples(log)
    assert one_line_error(excinfo).startswith(f"samples file {str(log)!r} line 3: not JSON")


def test_lm_eval_asks_for_its_git_hash_quietly(tmp_path, monkeypatch, capfd):
    """Outside a repository lm-eval's own git call prints git's "fatal: not a git repository" to the
    terminal, --quiet or not; under light_env_info the hash is asked for with git's messages discarded
    (None there, the commit inside a repository), and lm-eval's function is restored after."""
    import lm_eval
    import lm_eval.evaluator

    original = lm_eval.evaluator.get_git_commit_hash
    monkeypatch.chdir(tmp_path)
    with lm_eval_quiet.light_env_info(lm_eval):
        assert lm_eval.evaluator.get_git_commit_hash() is None
    assert capfd.readouterr().err == ""
    assert lm_eval.evaluator.get_git_commit_hash is original
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    if shutil.which("git") and (Path.cwd() / ".git").exists():
        assert lm_eval_quiet.quiet_git_hash()


def test_lm_eval_logging_without_quiet_shows_warnings_but_not_info_or_the_batch_warning(monkeypatch):
    """Not quiet: lm-eval's logger at WARNING (its INFO lines only with LMEVAL_LOG_LEVEL=INFO), its handlers
    drop the batch warning glmcheck's own --batch-size causes, other warnings pass and are captured; the
    handlers lose that filter afterwards."""
    import logging

    monkeypatch.delenv("LMEVAL_LOG_LEVEL", raising=False)
    logger = logging.getLogger("lm_eval")

    def record(message: str) -> logging.LogRecord:
        return logging.LogRecord("lm_eval.models.api_models", logging.WARNING, __file__, 1, message, None, None)

    batch = record(lm_eval_quiet.BATCH_WARNING + ". Ensure your API supports batched requests.")
    other = record("API request failed with error message: boom. Retrying...")
    with lm_eval_quiet.lm_eval_logging(quiet=False) as captured:
        assert logger.getEffectiveLevel() == logging.WARNING
        shown = [h for h in logger.handlers if h is not captured]
        assert shown and all(not h.filter(batch) and h.filter(other) for h in shown)
        logging.getLogger("lm_eval.models.api_models").warning("boom %d", 7)
    assert captured.messages[-1] == "boom 7"
    assert all(h.filter(batch) for h in shown)
