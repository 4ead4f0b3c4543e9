"""Seeded random-word prompts from a fixed in-repo word list (no downloads, no external data).

`random_word_prompts` draws only through `random.Random.randint` and `random.Random.choice`,
whose outputs for a given seed are stable across platforms and Python 3 versions, so the same
seed always yields the same prompts.
"""

from __future__ import annotations

import random

WORDS: tuple[str, ...] = (
    "about", "above", "across", "act", "add", "after", "again", "age", "ago", "air", "all",
    "almost", "alone", "along", "always", "among", "and", "animal", "answer", "any", "apple",
    "area", "arm", "around", "art", "ask", "away", "baby", "back", "bad", "bag", "ball", "bank",
    "base", "bear", "beat", "bed", "before", "begin", "behind", "bell", "best", "better",
    "between", "big", "bird", "black", "blue", "boat", "body", "bone", "book", "both", "box",
    "boy", "bread", "break", "bright", "bring", "brother", "brown", "build", "burn", "busy", "buy",
    "call", "camp", "can", "car", "card", "care", "carry", "case", "cat", "catch", "cause",
    "center", "chair", "chance", "change", "cheap", "child", "city", "class", "clean", "clear",
    "climb", "clock", "close", "cloth", "cloud", "cold", "color", "come", "common", "cook", "cool",
    "copy", "corn", "corner", "count", "country", "course", "cover", "cow", "cross", "crowd",
    "cry", "cup", "cut", "dance", "dark", "day", "deal", "dear", "deep", "desk", "dinner", "dog",
    "door", "down", "draw", "dream", "dress", "drink", "drive", "drop", "dry", "duck", "during",
    "dust", "each", "ear", "early", "earth", "east", "easy", "eat", "edge", "egg", "end", "enough",
    "even", "evening", "every", "eye", "face", "fact", "fall", "family", "far", "farm", "fast",
    "father", "field", "fill", "find", "fine", "finger", "fire", "first", "fish", "five", "floor",
    "flower", "fly", "follow", "food", "foot", "forest", "fox", "free", "fresh", "friend", "front",
    "fruit", "full", "game", "garden", "gate", "gift", "girl", "give", "glass", "gold", "good",
    "grass", "green", "ground", "group", "grow", "hair", "half", "hand", "happy", "hard", "hat",
    "head", "hear", "heart", "heavy", "help", "high", "hill", "hold", "home", "hope", "horse",
    "hot", "hour", "house", "idea", "iron", "island", "jump", "keep", "kind", "king", "kitchen",
    "lake", "lamp", "land", "large", "late", "laugh", "leaf", "learn", "left", "letter", "light",
    "line", "lion", "list", "little", "long", "look", "love", "low", "lunch", "machine", "map",
    "market", "meat", "milk", "mind", "minute", "money", "month", "moon", "morning", "mother",
    "mountain", "mouth", "move", "music", "name", "near", "neck", "new", "night", "noise", "north",
    "nose", "number", "ocean", "office", "old", "open", "orange", "page", "paint", "paper", "park",
    "party", "path", "pen", "pencil", "people", "piece", "place", "plant", "plate", "play",
    "pocket", "point", "pond", "poor", "pull", "push", "queen", "quick", "quiet", "rain", "read",
    "red", "rest", "rice", "right", "ring", "river", "road", "rock", "roof", "room", "rope",
    "round", "run", "salt", "sand", "school", "sea", "seat", "second", "seed", "sell", "send",
    "shape", "sheep", "shell", "ship", "shirt", "shoe", "shop", "short", "side", "sign", "silver",
    "simple", "sing", "sister", "sit", "sky", "sleep", "slow", "small", "smile", "snow", "soft",
    "song", "soon", "sound", "south", "space", "speak", "spring", "square", "stair", "star",
    "start", "stone", "store", "storm", "story", "street", "strong", "sugar", "summer", "sun",
    "sweet", "table", "tail", "talk", "tall", "tea", "teacher", "thin", "think", "tiger", "time",
    "today", "tongue", "town", "toy", "train", "tree", "true", "turn", "uncle", "under", "until",
    "valley", "village", "visit", "voice", "wait", "walk", "wall", "warm", "wash", "watch",
    "water", "wave", "week", "west", "wheel", "white", "wide", "wind", "window", "winter", "wire",
    "wish", "wood", "word", "work", "world", "write", "yard", "year", "yellow", "young",
)


def _check_positive_int(name: str, value: int) -> None:
    """ValueError naming `name` unless `value` is an int >= 1 (bools rejected)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def random_word_prompts(count: int, seed: int, min_words: int = 4, max_words: int = 10) -> list[str]:
    """`count` prompts of min_words..max_words (inclusive) words from WORDS, joined by spaces.

    Deterministic in (count, seed, min_words, max_words); prompt i is the same whatever `count`.
    """
    _check_positive_int("count", count)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}")
    _check_positive_int("min_words", min_words)
    _check_positive_int("max_words", max_words)
    if max_words < min_words:
        raise ValueError(f"max_words ({max_words}) must be >= min_words ({min_words})")
    rng = random.Random(seed)
    return [_one_prompt(rng, min_words, max_words) for _ in range(count)]


def _one_prompt(rng: random.Random, min_words: int, max_words: int) -> str:
    """One prompt: a length from rng.randint, then that many rng.choice draws."""
    length = rng.randint(min_words, max_words)
    return " ".join(rng.choice(WORDS) for _ in range(length))
