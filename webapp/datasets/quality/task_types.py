"""A transparent task-type classifier: a few ordered rules, the first that matches decides.

No model: each rule is shown on the report page next to the counts, so a reader can check why a row
landed where it did. Types: multi-turn dialogue, reasoning (math or code), instruction, other.
"""
from __future__ import annotations

import re
from typing import Any

DIALOGUE, MATH, CODE, INSTRUCTION, OTHER = "dialogue", "math", "code", "instruction", "other"
TYPES = (INSTRUCTION, DIALOGUE, MATH, CODE, OTHER)
LABELS = {INSTRUCTION: "Instruction", DIALOGUE: "Multi-turn dialogue", MATH: "Reasoning: math",
          CODE: "Reasoning: code", OTHER: "Other"}
REASONING = (MATH, CODE)
DOMINANT_SHARE = 0.70  # a type above this share of the rows gets a warning

_HUMAN_TURN = "\n\nHuman:"
_WORD = re.compile(r"[a-z0-9+#]+")
_MATH_META = re.compile(r"math|gsm|arith|algebra|geometry|aime|amc|olympiad|numina|theorem", re.I)
_CODE_META = re.compile(r"code|coding|program|python|humaneval|mbpp|leetcode|\bapps\b|\bsql\b", re.I)
# Cheap, case-sensitive patterns on the text; keyword sets on its lowercased words (a regex alternation of
# dozens of words costs more than the rest of a report's row).
_MATH_SYNTAX = re.compile(r"\\(?:frac|sqrt|boxed|sum|int|cdot|times|le|ge|pi)\b|\$[^$\n]{1,200}\$"
                          r"|\d\s*[-+*/^×÷=]\s*\d|\d\s*=|=\s*\d")
_MATH_WORDS = frozenset(["solve", "equation", "equations", "integral", "derivative", "probability", "calculate",
                         "compute", "prove", "theorem", "polynomial", "remainder", "divisible", "prime"])
_MATH_PHRASES = ("how many", "how much", "sum of", "product of")
_CODE_SYNTAX = re.compile(r"```|\bdef \w+\(|\bfunction\s*\w*\(|\bclass \w+[:({]|#include\b|\bimport \w+"
                          r"|\bSELECT\b.+\bFROM\b")
_CODE_WORDS = frozenset(["python", "javascript", "typescript", "java", "c++", "rust", "golang", "sql", "regex",
                         "bash", "html", "css", "debug", "compile"])
_CODE_PHRASES = ("write a function", "write the function", "write a program", "write a script", "write code",
                 "write a query", "stack trace")
_INSTRUCTION = re.compile(
    r"^\s*(?:please\s+)?(?:write|explain|summari[sz]e|list|describe|give|translate|create|generate|tell|"
    r"rewrite|classify|suggest|compare|draft|outline|name|define|provide|make|help|recommend|find|convert|"
    r"edit|correct|paraphrase|answer|identify|what|why|how|who|when|where|which|can|could|would|should|is|are|"
    r"do|does)\b", re.I)

RULES = [
    (LABELS[DIALOGUE], "the prompt is a conversation with more than one user turn (a message list, or an "
                       "HH-RLHF transcript with more than one Human turn)"),
    (LABELS[MATH], "the row's ability or data_source names a math set (math, gsm, arith, aime…), or the prompt "
                   "holds LaTeX, arithmetic such as 3+4 or 2x = 6, or words such as solve, equation, probability"),
    (LABELS[CODE], "the row's ability or data_source names a code set (code, python, humaneval, mbpp…), or the "
                   "prompt holds a code fence, a function or class definition, SQL, or names a programming "
                   "language or task (write a function, debug)"),
    (LABELS[INSTRUCTION], "the request (the last user message of a conversation) opens with a request or "
                          "question word (write, explain, list, what, how…) or ends with a question mark"),
    (LABELS[OTHER], "none of the above"),
]


def user_turns(prompt: Any, prompt_text: str) -> int:
    """How many user turns the prompt holds (1 for a plain-text prompt)."""
    if isinstance(prompt, list):
        return sum(1 for m in prompt if isinstance(m, dict) and m.get("role") == "user")
    return max(1, prompt_text.count(_HUMAN_TURN)) if _HUMAN_TURN in prompt_text else 1


def _request_text(prompt: Any, prompt_text: str) -> str:
    """What the user asks: the last user message of a conversation (not a system prompt), else the text."""
    if isinstance(prompt, list):
        for message in reversed(prompt):
            if isinstance(message, dict) and message.get("role") == "user" and isinstance(message.get("content"), str):
                return message["content"]
    return prompt_text


def classify(prompt: Any, prompt_text: str, *, ability: str = "", data_source: str = "") -> str:
    """The task type of one row (see RULES, tried in order)."""
    if user_turns(prompt, prompt_text) > 1:
        return DIALOGUE
    meta = f"{ability} {data_source}"
    if _MATH_META.search(meta):
        return MATH
    if _CODE_META.search(meta):
        return CODE
    text = _request_text(prompt, prompt_text)[:2000]
    low = text.lower()
    tokens = set(_WORD.findall(low))
    # code before math: "x = 1" in a program is not arithmetic
    if _CODE_SYNTAX.search(text) or tokens & _CODE_WORDS or any(p in low for p in _CODE_PHRASES):
        return CODE
    if _MATH_SYNTAX.search(text) or tokens & _MATH_WORDS or any(p in low for p in _MATH_PHRASES):
        return MATH
    if _INSTRUCTION.search(text) or text.rstrip().endswith("?"):
        return INSTRUCTION
    return OTHER


def coverage(counts: dict[str, int], dominant_share: float = DOMINANT_SHARE) -> dict[str, Any]:
    """Counts and shares per type (every type listed), reasoning's total, and a warning when one dominates."""
    total = sum(counts.values())
    full = {t: int(counts.get(t, 0)) for t in TYPES}
    shares = {t: (full[t] / total if total else 0.0) for t in TYPES}
    warning = ""
    top = max(TYPES, key=lambda t: full[t])
    if total and shares[top] > dominant_share:
        warning = (f"{LABELS[top]} is {shares[top]:.0%} of the rows (over {dominant_share:.0%}): the set is not "
                   "diverse. A policy trained on it may lose ground on the other kinds of task.")
    table = [{"type": t, "label": LABELS[t], "rows": full[t], "share": shares[t]} for t in TYPES]
    return {"counts": full, "shares": shares, "labels": LABELS, "table": table, "total": total,
            "reasoning": full[MATH] + full[CODE], "dominant": top if warning else "", "warning": warning,
            "dominant_share": dominant_share, "rules": RULES}
