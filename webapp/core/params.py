"""Ids from query strings: whole numbers in the database's range, or a ValueError (the caller answers 400)."""
from __future__ import annotations

from collections.abc import Iterable

MAX_ID = 2**63 - 1  # a BigAutoField; beyond it SQLite raises OverflowError and PostgreSQL a DataError


def parse_id(raw: object) -> int:
    text = str(raw).strip()
    if not text.isdigit() or len(text) > 19 or not 0 < int(text) <= MAX_ID:
        raise ValueError(f"{text[:30]!r} is not an id")
    return int(text)


def parse_ids(values: Iterable[object]) -> list[int]:
    return [parse_id(v) for v in values]
