"""Pure helpers of the sample browser: a word-level diff of two responses, and the colours of a
response's tokens by one per-token number: the policy-vs-reference log-ratio (each token's contribution to
the KL), the advantage, the policy's entropy, or the training pass's log-prob minus the rollout's."""
from __future__ import annotations

import difflib
import math
import re
from typing import Any

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

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


RED, BLUE, GREEN, ORANGE = "214,69,42", "36,87,214", "30,140,60", "230,140,20"
NOT_LOGGED = ("This sample has no per-token {what}: the backend that wrote it did not log {them} (the local trainer "
              "does; VERL's rollout dumps do not).")


def _values(raw: list) -> list[float | None]:
    return [float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None
            for v in raw]


def colour_tokens(tokens: Any, values: Any, *, what: str = "log-probabilities", them: str = "them",
                  name: str = "log-ratios", pos: str = RED, neg: str = BLUE, floor: float = 0.0,
                  scale: float | None = None) -> dict[str, Any]:
    """Each token with its value and a background colour, `pos` above zero and `neg` below; the strength is
    the share of `scale` (default: the largest |value| in the sample, at least `floor`, so that numerical
    noise stays pale). `reason` says why there is nothing to colour."""
    if not isinstance(tokens, list) or not isinstance(values, list) or not values:
        return {"tokens": [], "reason": NOT_LOGGED.format(what=what, them=them)}
    if len(tokens) != len(values):
        return {"tokens": [], "reason": f"The sample's {len(tokens)} tokens and {len(values)} {name} do not "
                                        "line up, so they cannot be coloured."}
    nums = _values(values)
    finite = [abs(v) for v in nums if v is not None]
    if scale is None or not scale > 0:
        scale = max([floor, *finite]) or 1.0
    out = []
    for text, v in zip(tokens, nums, strict=True):
        if v is None or v == 0:
            colour = "transparent"
        else:
            colour = f"rgba({pos if v > 0 else neg},{min(1.0, abs(v) / scale) * 0.85:.2f})"
        out.append({"text": str(text), "value": v, "colour": colour})
    top = sorted((t for t in out if t["value"] is not None), key=lambda t: -abs(t["value"]))[:5]
    total = sum(v for v in nums if v is not None)
    return {"tokens": out, "reason": "", "scale": scale, "sum": total, "mean": total / len(finite) if finite else None,
            "top": top, "max": max(finite, default=None)}


def token_colours(tokens: Any, logratio: Any) -> dict[str, Any]:
    """Tokens by their log-ratio: red where the policy gives the token more probability than the reference
    (a positive KL contribution), blue where less."""
    return colour_tokens(tokens, logratio)


# What the Tokens view can colour by: (label, the row's per-token key).
TOKEN_VIEWS = {"kl": ("KL contribution", "token_logratio"), "advantage": ("Advantage", "token_advantage"),
               "entropy": ("Entropy", "token_entropy"), "mismatch": ("Train − rollout", "token_logprob_diff")}
MISMATCH_FLOOR = 0.1  # |log-prob difference| drawn at full colour at least: rounding noise stays pale


def token_view(row: dict[str, Any], by: str, *, group_max_advantage: float | None = None,
               step_mismatch: dict[str, float | None] | None = None) -> dict[str, Any]:
    """The colours of one sample's tokens by `by` (a TOKEN_VIEWS key), with the words the page says.

    GRPO gives every token of a response its sample's outcome advantage: without per-token advantages the
    sample's advantage colours every token, scaled to the largest |advantage| of its group. A backend that
    logs the train-vs-rollout difference only per step (VERL's `training/rollout_probs_diff_*`) gets those
    numbers in the reason instead of colours."""
    tokens = row.get("tokens")
    if by == "advantage":
        values = row.get("token_advantage")
        per_token = isinstance(values, list) and bool(values)
        adv = row.get("advantage")
        if not per_token and isinstance(tokens, list) and isinstance(adv, (int, float)):
            values = [adv] * len(tokens)
        out = colour_tokens(tokens, values, what="advantages or tokens", them="them", name="advantages",
                            pos=GREEN, neg=RED, scale=None if per_token else (group_max_advantage or abs(adv or 0)))
        out["uniform"] = not per_token
        return out
    if by == "entropy":
        return colour_tokens(tokens, row.get("token_entropy"), what="entropy", them="it", name="entropies",
                             pos=ORANGE, neg=ORANGE)
    if by == "mismatch":
        out = colour_tokens(tokens, row.get("token_logprob_diff"), what="train-vs-rollout log-probabilities",
                            them="them", name="differences", floor=MISMATCH_FLOOR)
        if out["reason"] and step_mismatch:
            shown = ", ".join(f"{k} {v:.3g}" for k, v in step_mismatch.items() if v is not None)
            out["reason"] = ("This backend logs the train-vs-rollout difference only for the whole step, not per "
                             f"token (|p_train − p_rollout| at this step: {shown}); its rollout dump has no "
                             "per-token log-probabilities to colour.")
        return out
    return token_colours(tokens, row.get("token_logratio"))


def tokens_html(tokens: list[dict[str, Any]], by: str) -> SafeString:
    """The coloured spans of a sample's tokens, built in one pass: a 1,024-token response through the template
    language's per-token filters took longer than the page's whole budget. Texts are escaped."""
    parts = []
    for t in tokens:
        value = t.get("value")
        shown = "" if value is None else str(value)
        title = "" if value is None else f"{value:.4f}"
        extra = f' data-logratio="{shown}"' if by == "kl" else ""
        parts.append(f'<span class="mon-tok" style="background:{escape(t["colour"])}" title="{title}" '
                     f'data-value="{shown}"{extra}>{escape(t["text"])}</span>')
    return mark_safe("".join(parts))  # noqa: S308 - every text and colour is escaped above; numbers are floats
