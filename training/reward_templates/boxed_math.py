"""Boxed math answer: 1.0 when the last \\boxed{...} in the response equals the ground truth.

Both sides are normalised first: spaces, $, \\left/\\right, \\!, degrees and percent signs, \\text{}
wrappers and a trailing '.' are dropped, and \\dfrac/\\tfrac become \\frac. Numbers, fractions
('1/2', '\\frac{1}{2}') and decimals are then compared by value. No \\boxed{}: 0.0.
"""
import re


def last_boxed(text):
    """The contents of the last \\boxed{...} (or \\fbox{...}), braces matched; None if there is none."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth = 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


def normalise(answer):
    s = str(answer).strip()
    s = re.sub(r"\\text\{(.*?)\}", r"\1", s)
    for old, new in (("\\left", ""), ("\\right", ""), ("\\!", ""), ("\\,", ""), ("\\;", ""), ("$", ""),
                     ("^{\\circ}", ""), ("^\\circ", ""), ("\\%", ""), ("%", ""), ("\\dfrac", "\\frac"),
                     ("\\tfrac", "\\frac"), (" ", "")):
        s = s.replace(old, new)
    return s.rstrip(".")


def _value(s):
    m = re.fullmatch(r"\\frac\{(-?\d+)\}\{(-?\d+)\}|(-?\d+)/(-?\d+)", s)
    if m:
        num, den = (m.group(1), m.group(2)) if m.group(1) is not None else (m.group(3), m.group(4))
        return int(num) / int(den) if int(den) != 0 else None
    try:
        return float(s.replace(",", ""))
    except ValueError:
        return None


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    boxed = last_boxed(solution_str)
    if boxed is None:
        return 0.0
    got, want = normalise(boxed), normalise(ground_truth)
    if got == want:
        return 1.0
    a, b = _value(got), _value(want)
    return 1.0 if a is not None and b is not None and abs(a - b) < 1e-6 else 0.0
