"""Preference pairs whose chosen and rejected responses carry no preference signal."""
from __future__ import annotations

from webapp.datasets.quality.text import squash_whitespace

IDENTICAL, WHITESPACE = "identical", "whitespace"
RULE = ("A pair is flagged when its chosen and rejected responses are the same text, or the same once every "
        "space, tab and line break is removed: a reward model learns nothing from it.")


def pair_identity(chosen: str, rejected: str) -> str | None:
    """'identical', 'whitespace' (equal but for whitespace) or None (the responses differ)."""
    if chosen == rejected:
        return IDENTICAL
    if squash_whitespace(chosen) == squash_whitespace(rejected):
        return WHITESPACE
    return None
