"""Regenerate the generated prompt sets in glmcheck/data/resources/prompts/: random50.jsonl and heldout50.jsonl.

Usage: python scripts/make_prompts.py [--set random50|heldout50] [--out FILE]
random50: 50 records {"id": "random-NN", "prompt": ..., "category": "random-words"} from
`random_word_prompts(50, seed=2026)`. heldout50: 50 prose lines of the reference corpus's
held-out documents, cut mid-line after 3 lines of context (`glmcheck.data.heldout.heldout_prompt_records`;
category = the document). tests/test_prompts.py checks the committed files match.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from glmcheck.data.randomwords import random_word_prompts

COUNT = 50
SEED = 2026
CATEGORY = "random-words"
PROMPTS = Path(__file__).resolve().parent.parent / "glmcheck" / "data" / "resources" / "prompts"


def random_records(count: int = COUNT, seed: int = SEED) -> list[dict[str, str]]:
    """The records of the random-word prompt set, in file order."""
    prompts = random_word_prompts(count, seed=seed)
    return [{"id": f"random-{i:02d}", "prompt": text, "category": CATEGORY}
            for i, text in enumerate(prompts, 1)]


def render_jsonl(records: list[dict[str, str]]) -> str:
    """One JSON object per line, newline-terminated."""
    return "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", dest="name", default="random50", choices=["random50", "heldout50"])
    parser.add_argument("--out", type=Path, default=None)
    ns = parser.parse_args()
    out: Path = ns.out or PROMPTS / f"{ns.name}.jsonl"
    if ns.name == "random50":
        records = random_records()
    else:
        from glmcheck.data.heldout import heldout_prompt_records

        records = heldout_prompt_records(COUNT)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_jsonl(records), encoding="utf-8")
    print(f"wrote {len(records)} prompts to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
