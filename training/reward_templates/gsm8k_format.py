"""GSM8K answer format: 1.0 when the response ends its reasoning with '#### <number>', else 0.0.

Checks the shape only, not correctness: the number must come right after '#### ', as VERL's strict
gsm8k extraction reads it (only the last 300 characters are looked at, as there). Pair it with an answer
reward at a small weight, so that a model that never writes '####' still gets a gradient towards it.
"""
import re

_FINAL = re.compile(r"#### (\-?[0-9\.\,]+)")


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    tail = str(solution_str)[-300:]
    return 1.0 if _FINAL.search(tail) else 0.0
