"""GSM8K answer match: 1.0 when the number after the last '####' equals the ground truth.

Like VERL's gsm8k scorer in strict mode: commas, '$' and a trailing '.' are ignored, so '#### 1,200'
matches '1200'; numbers are also compared by value ('72.0' matches '72'). No '####': 0.0.
"""
import re

_ANSWER = re.compile(r"####\s*(-?[0-9][0-9,\.\$]*|-?\$[0-9][0-9,\.]*)")


def _normalise(text):
    return str(text).replace(",", "").replace("$", "").strip().rstrip(".")


def _same(a, b):
    if a == b:
        return True
    try:
        return abs(float(a) - float(b)) < 1e-9
    except ValueError:
        return False


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    answers = _ANSWER.findall(solution_str)
    if not answers:
        return 0.0
    return 1.0 if _same(_normalise(answers[-1]), _normalise(ground_truth)) else 0.0
