"""Exact match: 1.0 when the response equals the ground truth, ignoring surrounding whitespace.

The demo's reward. Use it for short-answer tasks where the whole response is the answer.
"""


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return 1.0 if str(solution_str).strip() == str(ground_truth).strip() else 0.0
