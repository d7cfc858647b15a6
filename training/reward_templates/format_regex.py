"""Format reward: 1.0 when the response follows '<think>...</think> <answer>...</answer>', else 0.0.

Checks the shape only, not correctness; combine it with an answer reward. A row can use its own
regular expression in extra_info["format_pattern"] (matched against the whole stripped response).
"""
import re

PATTERN = r"<think>.*?</think>\s*<answer>.*?</answer>"


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    pattern = (extra_info or {}).get("format_pattern") or PATTERN
    return 1.0 if re.fullmatch(pattern, solution_str.strip(), flags=re.DOTALL) else 0.0
