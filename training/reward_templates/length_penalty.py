"""Correctness minus a length penalty: prefers short correct answers.

correct = 1.0 when the answer (after the last '####' if there is one, else the whole response)
equals the ground truth. Responses longer than TARGET_CHARS (or extra_info["target_length"]) lose
PENALTY times the fraction by which they overshoot, capped at PENALTY:
score = correct - PENALTY * min(1, max(0, len - target) / target).
"""

TARGET_CHARS = 400
PENALTY = 0.5


def _answer(text):
    return text.rsplit("####", 1)[1].strip() if "####" in text else text.strip()


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    target = int((extra_info or {}).get("target_length") or TARGET_CHARS)
    correct = 1.0 if _answer(solution_str) == str(ground_truth).strip() else 0.0
    overshoot = min(1.0, max(0, len(solution_str) - target) / target)
    return correct - PENALTY * overshoot
