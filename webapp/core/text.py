"""Words for numbers: "1 pair", "2 pairs" (templates use Django's `pluralize`, scripts `wb.count`)."""
from __future__ import annotations


def count(n: int, noun: str, plural: str | None = None) -> str:
    """`n` with its noun in the right number, thousands separated: count(1, "row") is "1 row",
    count(1200, "row") is "1,200 rows"; `plural` for an irregular noun (count(2, "copy", "copies"))."""
    return f"{n:,} {noun if n == 1 else (plural or noun + 's')}"
