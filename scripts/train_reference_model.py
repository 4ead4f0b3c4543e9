"""Train a model of the trained set from scratch: ref-cpu or ref-gpu (a GLM-MoE-DSA checkpoint that learned language).

Usage:
  python scripts/train_reference_model.py ref-cpu --out runs/train-ref-cpu [--corpus FILE] [--fixture]
  python scripts/train_reference_model.py ref-gpu --out runs/train-ref-gpu --fixture   # on a GPU
  python scripts/train_reference_model.py --save-corpus .corpus/stdlib.jsonl.gz      # the corpus alone

The corpus is this Python's standard library and pydoc topics (`glmcheck.training.corpus`), or a
corpus file saved by `--save-corpus` (so another machine trains on the same text). An interrupted
run resumes from `<out>/train-state.pt`. `--fixture` copies the checkpoint (its loss plot to evidence/training/) to
glmcheck/data/resources/trained_models/<name> (and, for ref-gpu, its block-FP8 copy to
glmcheck/data/resources/trained_models/<name>-fp8) and the held-out documents to
glmcheck/data/resources/corpus/heldout.jsonl.gz. The recipe, the record it writes and the measured results:
docs/models.md, "Trained models".
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("name", nargs="?", help="trained model: ref-cpu or ref-gpu")
    parser.add_argument("--out", help="run folder (state, checkpoint, held-out documents)")
    parser.add_argument("--corpus", default=None, help="corpus file (default: this Python's standard library)")
    parser.add_argument("--save-corpus", default=None, help="write this Python's corpus to FILE and stop")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", default=None, help="DENSE,SPARSE steps instead of the recipe's (short runs)")
    parser.add_argument("--micro-batch", type=int, default=None, help="sequences per forward (memory)")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    parser.add_argument("--no-resume", action="store_true", help="start over even if a state file exists")
    parser.add_argument("--fixture", action="store_true",
                        help="copy the result into glmcheck/data/resources/trained_models/ (the package data)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    ns = parser.parse_args(argv)
    try:
        return run(ns)
    except (ValueError, FileNotFoundError) as err:
        print(f"train_reference_model: {err}", file=sys.stderr)
        return 2


def run(ns: argparse.Namespace) -> int:
    from glmcheck.data.documents import save_documents
    from glmcheck.training import corpus

    if ns.save_corpus:
        docs = corpus.stdlib_documents()
        save_documents(docs, ns.save_corpus)
        print(f"{ns.save_corpus}: {len(docs)} documents, sha256 {corpus.corpus_hash(docs)}")
        return 0
    if not ns.name or not ns.out:
        raise ValueError("give a trained model name and --out (or --save-corpus FILE)")
    steps = None
    if ns.steps:
        try:
            steps = tuple(int(v) for v in ns.steps.split(","))
        except ValueError:
            raise ValueError(f"--steps must be DENSE,SPARSE (two ints), got {ns.steps!r}") from None
        if len(steps) != 2:
            raise ValueError(f"--steps must be DENSE,SPARSE (two ints), got {ns.steps!r}")
    from glmcheck.training.export import PLOT_FILE
    from glmcheck.training.geometry import trained_geometry
    from glmcheck.training.recipe import HELDOUT_FILE, train_model

    geometry = trained_geometry(ns.name)
    record = train_model(ns.name, ns.out, corpus=ns.corpus, device=ns.device, seed=ns.seed, steps=steps,
                         micro_batch=ns.micro_batch, resume=not ns.no_resume, quiet=ns.quiet)
    print(summary(record))
    if ns.fixture:
        checkpoint = Path(ns.out) / "checkpoint"
        target = ROOT / "glmcheck" / "data" / "resources" / "trained_models" / geometry.fixture
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(checkpoint, target, ignore=shutil.ignore_patterns(PLOT_FILE))  # no check reads the plot
        shutil.copy2(checkpoint / PLOT_FILE, ROOT / "evidence" / "training" / f"{ns.name}-{PLOT_FILE}")
        if ns.name == "ref-gpu":
            from glmcheck.model.fp8_export import write_fp8

            shutil.rmtree(target.with_name(target.name + "-fp8"), ignore_errors=True)
            write_fp8(target, target.with_name(target.name + "-fp8"))
        (ROOT / "glmcheck" / "data" / "resources" / "corpus").mkdir(parents=True, exist_ok=True)
        shutil.copy2(Path(ns.out) / HELDOUT_FILE, ROOT / "glmcheck" / "data" / "resources" / "corpus" / HELDOUT_FILE)
        print(f"fixture: {target}")
    return 0


def summary(record: dict) -> str:
    lines = [(f"{record['reference_model']}: {record['parameters'] / 1e6:.2f} M parameters on {record['device']}, "
              f"{record['tokens_seen'] / 1e6:.1f} M tokens in {record['train_wall_s']:.0f} s"),
             (f"held-out loss {record['final_heldout_loss']:.4f}; check loss {record['check']['loss']:.4f} "
              f"({record['check']['windows']} x {record['check']['len']} tokens)")]
    for stage, rows in record["recall"].items():
        for row in rows:
            lines.append(f"recall after {stage:6s} layer {row['layer']}: indexer {row['indexer']:.3f}, "
                         f"recent window {row['recent_window']:.3f}, chance {row['chance']:.3f} "
                         f"(top-{row['topk']}, {row['tokens']} tokens)")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
