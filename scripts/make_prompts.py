"""Regenerate prompts/random50.jsonl from the seeded random-word generator.

Usage: python scripts/make_prompts.py [--out prompts/random50.jsonl]
The file is 50 records {"id": "random-NN", "prompt": ..., "category": "random-words"} from
`random_word_prompts(50, seed=2026)`; tests/test_prompts.py checks the committed file matches.
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
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "prompts" / "random50.jsonl"


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
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    out: Path = parser.parse_args().out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_jsonl(random_records()), encoding="utf-8")
    print(f"wrote {COUNT} prompts to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
