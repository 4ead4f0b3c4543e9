"""`glmcheck tasks`: task accuracy against running servers, with a paired verdict (lm-evaluation-harness)."""

from __future__ import annotations

import argparse
from pathlib import Path

from glmcheck.commands.output_format import add_format_option
from glmcheck.evaluate.arguments import check_count, check_number, check_out_dir


def add_parser(sub) -> None:
    p = sub.add_parser("tasks", help="task accuracy of servers, judged question by question (lm-evaluation-harness)",
                       description="Run lm-evaluation-harness tasks against a reference server and candidate servers "
                                   "(OpenAI-compatible /v1/completions) and judge each candidate against the "
                                   "reference question by question: McNemar's exact test, a paired bootstrap "
                                   "interval, the control pair's own difference and the smallest drop this many "
                                   "questions can detect; PASS, FAIL or INCONCLUSIVE (with the questions needed). "
                                   "'glmcheck tasks compare A B [...]' judges sample logs made elsewhere; "
                                   "'glmcheck tasks --write-yaml DIR' writes glmcheck's own tasks for your own lm_eval "
                                   "command. Needs pip install 'glmcheck[tasks]'.")
    p.add_argument("compare", nargs="*", metavar="compare A B",
                   help="compare REFERENCE CANDIDATE [...]: lm-eval sample logs (samples_<task>_<date>.jsonl files, "
                        "or folders of them) instead of servers")
    p.add_argument("--endpoint", action="append", default=None, metavar="NAME=URL",
                   help="a server, repeatable: the first is the reference, the others candidates")
    p.add_argument("--control", default=None, metavar="NAME=URL (or, with compare, a sample log)",
                   help="the control: another instance of the reference (default: the reference asked again)")
    p.add_argument("--tasks", default=None, help="comma-separated lm-eval task names (glmcheck_heldout_mc: ours, "
                                                 "runs anywhere; gsm8k, mmlu... where the datasets can be fetched)")
    p.add_argument("--model", default="ref-cpu",
                   help="the servers' model, for its tokenizer: a trained model's name (default ref-cpu)")
    p.add_argument("--checkpoint", default=None, help="the servers' checkpoint directory (its tokenizer files)")
    p.add_argument("--limit", type=int, default=None, help="only the first N questions of each task")
    p.add_argument("--max-drop", type=float, default=1.0,
                   help="the largest acceptable accuracy drop, in points (default 1)")
    p.add_argument("--alpha", type=float, default=0.05, help="McNemar's test level (default 0.05)")
    p.add_argument("--power", type=float, default=0.8,
                   help="the detection probability a PASS needs at --max-drop (default 0.8)")
    p.add_argument("--metric", default=None,
                   help="judge by this per-question metric (NAME or NAME,FILTER) instead of each task's first 0/1 one")
    p.add_argument("--batch-size", type=int, default=8,
                   help="prompts a request (default 8; also in the command --write-yaml prints)")
    p.add_argument("--concurrency", type=int, default=4,
                   help="requests in flight (default 4; also in the command --write-yaml prints)")
    p.add_argument("--timeout", type=float, default=None, help="seconds to wait for a server's answer (default 120)")
    p.add_argument("--out", default=None, help="record directory (default runs/tasks-<timestamp>); sample logs go "
                                               "to <out>/samples/<server>/; a rerun resumes finished servers")
    p.add_argument("--overwrite", action="store_true", help="replace the record in --out instead of resuming it")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    add_format_option(p)
    p.add_argument("--write-yaml", default=None, metavar="DIR",
                   help="write glmcheck's own tasks (YAML and questions) into DIR for lm_eval --include_path DIR, "
                        "print an lm_eval command for them and exit; runs nothing")
    p.set_defaults(handler=handle, precheck=precheck)


# Options that ask for a run: with --write-yaml, which runs nothing, each is refused by name.
RUN_OPTIONS = (("--endpoint", "endpoint"), ("--tasks", "tasks"), ("--control", "control"), ("--limit", "limit"),
               ("--metric", "metric"), ("--out", "out"), ("--overwrite", "overwrite"), ("--timeout", "timeout"))


def precheck(ns: argparse.Namespace) -> None:
    """What needs no server (`glmcheck.cli` runs it before any heavy import)."""
    if ns.write_yaml is not None:
        given = [flag for flag, field in RUN_OPTIONS if getattr(ns, field)] + (["compare"] if ns.compare else [])
        if given:
            raise ValueError(f"--write-yaml writes task files and runs nothing: drop {', '.join(given)}")
        return
    if ns.compare:
        if ns.compare[0] != "compare" or len(ns.compare) < 3:
            raise ValueError(f"expected 'tasks compare REFERENCE CANDIDATE [...]', got {' '.join(ns.compare)!r}")
        given = [f for f, v in (("--endpoint", ns.endpoint), ("--tasks", ns.tasks), ("--limit", ns.limit)) if v]
        if given:
            raise ValueError(f"{', '.join(given)} applies to servers; 'tasks compare' reads sample logs")
    else:
        if not ns.endpoint or len(ns.endpoint) < 2:
            raise ValueError("--endpoint: name the reference server first and at least one candidate "
                             "(or 'tasks compare A B' for sample logs)")
        if not ns.tasks or not [t for t in ns.tasks.split(",") if t.strip()]:
            raise ValueError("--tasks: name at least one lm-eval task (e.g. glmcheck_heldout_mc)")
        check_out_dir(ns.out, overwrite=ns.overwrite, resumable=True)
    check_count(ns.limit, "--limit")
    check_number(ns.max_drop, "--max-drop")
    if not ns.max_drop < 100:
        raise ValueError(f"--max-drop must be in [0, 100) points, got {ns.max_drop}")
    check_count(ns.batch_size, "--batch-size")
    check_count(ns.concurrency, "--concurrency")
    check_number(ns.timeout, "--timeout", positive=True)


def handle(ns: argparse.Namespace) -> int:
    from glmcheck.commands.common import run_report
    from glmcheck.evaluate import CheckOptions, tasks, tasks_compare
    from glmcheck.sources.transport import HttpOptions

    if ns.write_yaml is not None:
        return write_yaml(ns)
    stats = {"max_drop": ns.max_drop / 100, "alpha": ns.alpha, "power": ns.power, "metric": ns.metric}
    if ns.compare:
        return run_report(ns, "tasks", lambda _: tasks_compare(ns.compare[1], ns.compare[2:], control=ns.control,
                                                                **stats))
    http = HttpOptions(timeout=ns.timeout) if ns.timeout else HttpOptions()
    return run_report(ns, "tasks", lambda record_dir: tasks(
        ns.endpoint, [t.strip() for t in ns.tasks.split(",") if t.strip()], control=ns.control,
        tokenizer=CheckOptions(model=ns.model, checkpoint=ns.checkpoint), limit=ns.limit, batch_size=ns.batch_size,
        concurrency=ns.concurrency, http=http, record_dir=record_dir, overwrite=ns.overwrite, quiet=ns.quiet, **stats),
        resumable=True)


def write_yaml(ns: argparse.Namespace) -> int:
    """`--write-yaml DIR`: glmcheck's own tasks for a user's own lm_eval command, and that command."""
    from glmcheck.model.trained import is_trained, trained_checkpoint
    from glmcheck.tasks.harness import LM_EVAL_MODEL, OWN_TASKS, write_own_task_folders

    written = write_own_task_folders(ns.write_yaml)
    for path in written:
        print(f"wrote {path} (its questions beside it)")
    tokenizer = ns.checkpoint or (trained_checkpoint(ns.model) if is_trained(ns.model) else "TOKENIZER_DIR")
    include = Path(ns.write_yaml).resolve()
    # the batching glmcheck tasks asks with (--batch-size prompts a request, --concurrency requests in flight)
    print(f"run them with: lm_eval --model {LM_EVAL_MODEL} --model_args base_url=http://HOST:PORT/v1/completions,"
          f"model=MODEL,tokenizer={tokenizer},tokenizer_backend=huggingface,tokenized_requests=True,"
          f"num_concurrent={ns.concurrency},max_retries=3 --batch_size {ns.batch_size} "
          f"--include_path {include} --tasks {','.join(OWN_TASKS)} --output_path OUT --log_samples")
    return 0
