"""Contamination: training prompts that share an n-gram with a prompt of an evaluation set.

The rule of GPT-3's and open-r1's decontamination: lowercase, split into words (punctuation dropped),
and flag a training row when any run of N consecutive words (13 by default) of its prompt also appears
in an evaluation prompt. Prompts shorter than N words have no such run: they count when their whole
normalised text equals a (short) evaluation prompt. The evaluation side is held as a sorted array of
64-bit hashes with the owning evaluation row next to each, so a lookup is a binary search.
"""
from __future__ import annotations

from array import array
from collections.abc import Iterable

import numpy as np

from webapp.datasets.quality.text import words

NGRAM = 13
MIN_NGRAM, MAX_NGRAM = 5, 50
_MASK = (1 << 64) - 1
_SHORT = 0x5DEECE66D  # mixed into whole-text hashes of short prompts: never equal to an n-gram's


def rule(n: int = NGRAM) -> str:
    return (f"A row is contaminated when its prompt shares a run of {n} consecutive words with a prompt of an "
            f"evaluation set (both lowercased, punctuation dropped), the {n}-gram rule of GPT-3's and open-r1's "
            f"decontamination. A prompt shorter than {n} words counts when its whole text equals an evaluation "
            "prompt under the same normalisation.")


def ngram_hashes(text: str, n: int = NGRAM) -> list[int]:
    """The 64-bit hashes of the prompt's word n-grams, or of its whole text when it is shorter than n words.

    Python's string hash: stable within one process, which is where a report compares both sides.
    """
    tokens = words(text)
    if not tokens:
        return []
    if len(tokens) < n:
        return [hash((_SHORT, " ".join(tokens))) & _MASK]
    return [hash(" ".join(tokens[i:i + n])) & _MASK for i in range(len(tokens) - n + 1)]


class EvalIndex:
    """The n-grams of every evaluation prompt, each with the (set number, row index) it came from."""

    def __init__(self, n: int = NGRAM):
        if not MIN_NGRAM <= n <= MAX_NGRAM:
            raise ValueError(f"The n-gram size must be between {MIN_NGRAM} and {MAX_NGRAM} words.")
        self.n = n
        self._hashes, self._owners = array("Q"), array("q")
        self.hashes = np.zeros(0, dtype=np.uint64)
        self.owners = np.zeros(0, dtype=np.int64)
        self.rows = 0

    def add(self, eval_set: int, rows: Iterable[tuple[int, str]]) -> None:
        """Add (row index, prompt text) pairs of evaluation set number `eval_set`."""
        for index, text in rows:
            grams = set(ngram_hashes(text, self.n))
            self._hashes.extend(grams)
            self._owners.extend([(eval_set << 40) | index] * len(grams))
            self.rows += 1

    def freeze(self) -> EvalIndex:
        """Sort for lookups (after the last add)."""
        hashes = np.frombuffer(self._hashes, dtype=np.uint64) if len(self._hashes) else np.zeros(0, np.uint64)
        owners = np.frombuffer(self._owners, dtype=np.int64) if len(self._owners) else np.zeros(0, np.int64)
        order = np.argsort(hashes, kind="stable")
        self.hashes, self.owners = hashes[order], owners[order]
        self._hashes, self._owners = array("Q"), array("q")
        return self

    def __len__(self) -> int:
        return int(self.hashes.size)

    def match(self, text: str) -> tuple[int, int, int] | None:
        """(evaluation set number, its row index, how many of the prompt's n-grams matched), or None."""
        if not self.hashes.size:
            return None
        grams = ngram_hashes(text, self.n)
        if not grams:
            return None
        query = np.fromiter(grams, dtype=np.uint64, count=len(grams))
        pos = np.searchsorted(self.hashes, query)
        pos[pos == self.hashes.size] = 0
        hit = self.hashes[pos] == query
        if not hit.any():
            return None
        owner = int(self.owners[pos[np.argmax(hit)]])
        return owner >> 40, owner & ((1 << 40) - 1), int(hit.sum())
