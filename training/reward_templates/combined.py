"""Several signals, weighted: correctness, format and brevity, returned with their components.

correct: the number after the last '####' equals the ground truth (1/0); format: the response ends
with a '#### <number>' line (1/0); brevity: 1 up to TARGET_CHARS, then falling linearly to 0 at twice
that. score = weighted mean with WEIGHTS. The components come back as extra keys, so they show up in
the run's validation metrics (every sample returns the same keys, as VERL requires).
"""
import re

WEIGHTS = {"correct": 1.0, "format": 0.2, "brevity": 0.1}
TARGET_CHARS = 400
_ANSWER = re.compile(r"####\s*(-?[0-9][0-9,\.]*)")
_FINAL_LINE = re.compile(r"####\s*-?[0-9][0-9,\.]*\s*$")


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    answers = _ANSWER.findall(solution_str)
    got = answers[-1].replace(",", "").rstrip(".") if answers else None
    parts = {
        "correct": 1.0 if got is not None and got == str(ground_truth).replace(",", "").strip() else 0.0,
        "format": 1.0 if _FINAL_LINE.search(solution_str) else 0.0,
        "brevity": max(0.0, min(1.0, 2.0 - len(solution_str) / TARGET_CHARS)),
    }
    score = sum(WEIGHTS[k] * v for k, v in parts.items()) / sum(WEIGHTS.values())
    return {"score": score, **parts}
