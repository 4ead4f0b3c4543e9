"""Prompt sets, their loader's errors, the random-word generator and the byte tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from glmcheck.data.prompts import PROMPT_SETS, PROMPTS_DIR, Prompt, load_prompts
from glmcheck.data.randomwords import WORDS, random_word_prompts
from glmcheck.data.tokenizer import ByteTokenizer


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


# --- prompt sets -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", PROMPT_SETS)
def test_prompt_set_has_50_unique_non_empty_prompts(name: str) -> None:
    prompts = load_prompts(name)
    assert len(prompts) == 50
    assert all(isinstance(p, Prompt) for p in prompts)
    assert len({p.id for p in prompts}) == 50
    assert all(p.prompt.strip() for p in prompts)
    prefix = name.removesuffix("50")
    assert [p.id for p in prompts] == [f"{prefix}-{i:02d}" for i in range(1, 51)]


def test_limit_keeps_the_first_prompts_in_file_order() -> None:
    full = load_prompts("natural50")
    assert load_prompts("natural50", limit=3) == full[:3]
    assert load_prompts("natural50", limit=500) == full
    assert full[0] == Prompt("natural-01", "The capital of France is", "geography")


def test_a_path_loads_like_its_set_name() -> None:
    assert load_prompts(str(PROMPTS_DIR / "random50.jsonl")) == load_prompts("random50")


def test_missing_id_and_category_get_defaults(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "mine.jsonl", ['{"prompt": "a b"}', "",
                                                 '{"id": "x", "prompt": "c", "category": "k"}'])
    assert load_prompts(path) == [Prompt("mine-1", "a b", ""), Prompt("x", "c", "k")]


def test_loading_writes_no_files(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "p.jsonl", ['{"prompt": "hello"}'])
    repo = PROMPTS_DIR.parent
    before_repo, before_tmp = sorted(repo.iterdir()), sorted(tmp_path.iterdir())
    before_prompts = sorted(PROMPTS_DIR.iterdir())
    load_prompts("natural50")
    load_prompts(path)
    assert sorted(repo.iterdir()) == before_repo
    assert sorted(PROMPTS_DIR.iterdir()) == before_prompts
    assert {PROMPTS_DIR / f"{n}.jsonl" for n in PROMPT_SETS} <= set(before_prompts)
    assert sorted(tmp_path.iterdir()) == before_tmp


# --- loader errors -------------------------------------------------------------------------------

def test_unknown_set_name_lists_known_sets() -> None:
    with pytest.raises(FileNotFoundError, match=r"no-such-set.*natural50, random50"):
        load_prompts("no-such-set")


def test_missing_path_raises_file_not_found(tmp_path: Path) -> None:
    missing = tmp_path / "absent.jsonl"
    with pytest.raises(FileNotFoundError, match=r"absent\.jsonl.*natural50"):
        load_prompts(str(missing))


@pytest.mark.parametrize("text", ["", "\n\n  \n"])
def test_empty_file(tmp_path: Path, text: str) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text(text)
    with pytest.raises(ValueError, match=r"prompt file .*empty\.jsonl is empty"):
        load_prompts(path)


@pytest.mark.parametrize("bad_line", ['{"prompt": "x"', "not json", '["a list"]'])
def test_malformed_line_names_file_and_line(tmp_path: Path, bad_line: str) -> None:
    path = write_lines(tmp_path / "bad.jsonl", ['{"prompt": "fine"}', bad_line])
    with pytest.raises(ValueError, match=r"bad\.jsonl, line 2"):
        load_prompts(path)


@pytest.mark.parametrize("record", ['{"id": "b"}', '{"id": "b", "prompt": ""}',
                                    '{"id": "b", "prompt": "  "}', '{"id": "b", "prompt": 7}',
                                    '{"id": "b", "prompt": null}'])
def test_record_without_a_prompt_string(tmp_path: Path, record: str) -> None:
    path = write_lines(tmp_path / "noprompt.jsonl", ['{"id": "a", "prompt": "fine"}', record])
    with pytest.raises(ValueError, match=r"noprompt\.jsonl, line 2 \(record 2\): 'prompt'"):
        load_prompts(path)


@pytest.mark.parametrize("record", ['{"id": 3, "prompt": "x"}', '{"id": "", "prompt": "x"}',
                                    '{"prompt": "x", "category": 5}'])
def test_bad_id_or_category(tmp_path: Path, record: str) -> None:
    path = write_lines(tmp_path / "fields.jsonl", [record])
    with pytest.raises(ValueError, match=r"fields\.jsonl, line 1"):
        load_prompts(path)


def test_duplicate_ids(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "dups.jsonl", ['{"id": "a", "prompt": "x"}',
                                                 '{"id": "b", "prompt": "y"}',
                                                 '{"id": "a", "prompt": "z"}'])
    with pytest.raises(ValueError, match=r"dups\.jsonl: duplicate ids \['a'\]"):
        load_prompts(path)


@pytest.mark.parametrize("limit", [0, -1, 2.0, True, "3"])
def test_bad_limit(limit: object) -> None:
    with pytest.raises(ValueError, match="limit must be a positive int or None"):
        load_prompts("natural50", limit=limit)  # type: ignore[arg-type]


# --- random-word generator ----------------------------------------------------------------------

def test_word_list() -> None:
    assert len(WORDS) >= 300
    assert len(set(WORDS)) == len(WORDS)
    assert all(w.isalpha() and w.islower() for w in WORDS)


def test_generator_is_deterministic() -> None:
    first = random_word_prompts(20, seed=7)
    assert random_word_prompts(20, seed=7) == first
    assert random_word_prompts(20, seed=8) != first
    assert random_word_prompts(5, seed=7) == first[:5]
    for text in first:
        words = text.split(" ")
        assert 4 <= len(words) <= 10 and set(words) <= set(WORDS)


def test_generator_respects_word_bounds() -> None:
    assert all(len(p.split()) == 3 for p in random_word_prompts(10, seed=1, min_words=3, max_words=3))


@pytest.mark.parametrize(("kwargs", "name"), [({"count": 0}, "count"), ({"seed": "1"}, "seed"),
                                              ({"min_words": 0}, "min_words"),
                                              ({"max_words": 0}, "max_words"),
                                              ({"min_words": 5, "max_words": 4}, "max_words")])
def test_generator_rejects_bad_arguments(kwargs: dict, name: str) -> None:
    args = {"count": 3, "seed": 0, **kwargs}
    with pytest.raises(ValueError, match=name):
        random_word_prompts(**args)


def test_random50_file_matches_the_generator() -> None:
    expected = [{"id": f"random-{i:02d}", "prompt": text, "category": "random-words"}
                for i, text in enumerate(random_word_prompts(50, seed=2026), 1)]
    lines = (PROMPTS_DIR / "random50.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == expected
    assert load_prompts("random50") == [Prompt(**record) for record in expected]


# --- byte tokenizer ------------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["The capital of France is", "Grüße, 世界", "", "tab\tnew\nline"])
def test_tokenizer_round_trips(text: str) -> None:
    tok = ByteTokenizer(512)
    assert tok.decode(tok.encode(text)) == text
    assert tok.decode(tok.encode(text, add_bos=False)) == text


def test_encode_adds_bos_only_when_asked() -> None:
    tok = ByteTokenizer(512)
    assert tok.encode("hi") == [tok.bos_id, 3 + ord("h"), 3 + ord("i")]
    assert tok.encode("hi", add_bos=False) == [3 + ord("h"), 3 + ord("i")]
    assert (tok.bos_id, tok.eos_id, tok.pad_id, tok.vocab_size) == (0, 1, 2, 512)


def test_ids_stay_inside_the_vocabulary() -> None:
    tok = ByteTokenizer(512)
    ids = tok.encode(bytes(range(256)).decode("latin-1") + "Grüße, 世界 🙂")
    assert all(0 <= i < 259 < tok.vocab_size for i in ids)


def test_decode_skips_specials_marks_high_ids_and_replaces_bad_utf8() -> None:
    tok = ByteTokenizer(512)
    ids = [tok.bos_id, *tok.encode("ab", add_bos=False), 300, tok.eos_id, tok.pad_id, 3 + 0xFF]
    assert tok.decode(ids) == "ab<300>\ufffd"


def test_token_text_is_readable() -> None:
    tok = ByteTokenizer(512)
    assert [tok.token_text(i) for i in (0, 1, 2)] == ["<bos>", "<eos>", "<pad>"]
    assert tok.token_text(3 + ord("A")) == "A"
    assert tok.token_text(3 + ord(" ")) == " "
    assert tok.token_text(3 + ord("\n")) == "<0x0A>"
    assert tok.token_text(3 + 0xC3) == "<0xC3>"
    assert tok.token_text(300) == "<300>"


def test_out_of_range_ids_are_rejected() -> None:
    tok = ByteTokenizer(512)
    with pytest.raises(ValueError, match="token id"):
        tok.token_text(512)
    with pytest.raises(ValueError, match="token id"):
        tok.decode([-1])


@pytest.mark.parametrize("size", [100, 258, 259.0, True])
def test_small_or_non_int_vocab_is_rejected(size: object) -> None:
    with pytest.raises(ValueError, match="vocab_size"):
        ByteTokenizer(size)  # type: ignore[arg-type]
    assert ByteTokenizer(259).vocab_size == 259
