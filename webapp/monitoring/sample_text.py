"""Pure helpers of the sample browser: a word-level diff of two responses, and the colours of a
response's tokens by their policy-vs-reference log-ratio (each token's contribution to the KL)."""
from __future__ import annotations

import difflib
import math
import re
from typing import Any

_WORDS = re.compile(r"\s+|[^\s]+")


def words(text: str) -> list[str]:
    """Words and the whitespace between them (joined back they give the text)."""
    return _WORDS.findall(text or "")


def word_diff(a: str, b: str) -> list[tuple[str, str]]:
    """[(op, text)] turning `a` into `b` word by word: op is "same", "del" (only in a) or "ins" (only in b)."""
    wa, wb = words(a), words(b)
    out: list[tuple[str, str]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=wa, b=wb, autojunk=False).get_opcodes():
        if op == "equal":
            out.append(("same", "".join(wa[i1:i2])))
            continue
        if i2 > i1:
            out.append(("del", "".join(wa[i1:i2])))
        if j2 > j1:
            out.append(("ins", "".join(wb[j1:j2])))
    return out


def diff_stats(segments: list[tuple[str, str]]) -> dict[str, int]:
    """How many words each side lost and gained."""
    count = {"del": 0, "ins": 0, "same": 0}
    for op, text in segments:
        count[op] += len(text.split())
    return count


def token_colours(tokens: Any, logratio: Any) -> dict[str, Any]:
    """Each token with its log-ratio and a background colour: red where the policy gives the token more
    probability than the reference (a positive KL contribution), blue where less; the strength is the
    share of the largest |log-ratio| in the sample. `reason` says why there is nothing to colour."""
    if not isinstance(tokens, list) or not isinstance(logratio, list) or not logratio:
        return {"tokens": [], "reason": "This sample has no per-token log-probabilities: the backend that wrote "
                                        "it did not log them (the local trainer does; VERL's rollout dumps do not)."}
    if len(tokens) != len(logratio):
        return {"tokens": [], "reason": f"The sample's {len(tokens)} tokens and {len(logratio)} log-ratios do not "
                                        "line up, so they cannot be coloured."}
    values = [float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None for v in logratio]
    finite = [abs(v) for v in values if v is not None]
    scale = max(finite) if finite and max(finite) > 0 else 1.0
    out = []
    for text, v in zip(tokens, values, strict=True):
        if v is None:
            colour = "transparent"
        else:
            alpha = min(1.0, abs(v) / scale) * 0.85
            colour = f"rgba(214,69,42,{alpha:.2f})" if v > 0 else f"rgba(36,87,214,{alpha:.2f})"
        out.append({"text": str(text), "value": v, "colour": colour})
    top = sorted((t for t in out if t["value"] is not None), key=lambda t: -abs(t["value"]))[:5]
    total = sum(v for v in values if v is not None)
    return {"tokens": out, "reason": "", "scale": scale, "sum": total, "mean": total / len(finite) if finite else None,
            "top": top}
