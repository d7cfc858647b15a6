"""Seeded train/validation splits (pure)."""
from __future__ import annotations

import random
import re

from webapp.core import text

_SPEC = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(%?)\s*$")


def parse_split(spec: str | int | None) -> tuple[float | None, int | None]:
    """Return (percent, None) for '10%' or (None, count) for '200'; raise ValueError otherwise."""
    text = "10%" if spec is None or spec == "" else str(spec)
    m = _SPEC.match(text)
    if not m:
        raise ValueError(f"'{text}' is not a split: use a percentage of rows for validation (10%) or a count (200).")
    number, percent = m.groups()
    if percent:
        value = float(number)
        if not 0 <= value < 100:
            raise ValueError("The validation share must be at least 0% and under 100%.")
        return value, None
    if "." in number:
        raise ValueError("A validation row count must be a whole number (or add % for a share).")
    return None, int(number)


def val_count(spec: str | int | None, n: int) -> int:
    """How many of `n` rows go to validation; raise ValueError when a count cannot be met."""
    percent, count = parse_split(spec)
    if count is not None:
        if count >= n and count > 0:
            raise ValueError(f"The split asks for {count} validation rows but only "
                             f"{text.count(n, 'row')} {'was' if n == 1 else 'were'} imported; "
                             "at least one row must stay for training.")
        return count
    k = round(n * percent / 100)
    return min(k, max(n - 1, 0))


def val_indices(n: int, k: int, seed: int) -> list[int]:
    """The sorted row indices (0..n-1) that form the validation split: the same for the same n, k and seed."""
    return sorted(random.Random(seed).sample(range(n), k)) if k else []
