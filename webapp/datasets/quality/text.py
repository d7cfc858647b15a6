"""Text normalisation shared by the checks: lowercase word tokens, shingles and n-gram hashes."""
from __future__ import annotations

import re

_WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    """Lowercase word tokens; punctuation and whitespace separate them ("3+4=" -> ["3", "4"])."""
    return _WORD.findall(text.lower())


def shingles(tokens: list[str], n: int) -> set[str]:
    """The distinct runs of `n` consecutive tokens; a text shorter than `n` tokens is one shingle."""
    if len(tokens) <= n:
        return {" ".join(tokens)}
    return set(map(" ".join, zip(*(tokens[i:] for i in range(n)), strict=False)))


def squash_whitespace(text: str) -> str:
    """The text with every run of whitespace removed: two texts equal under it differ only in whitespace."""
    return "".join(text.split())
