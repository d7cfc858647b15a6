"""GSM8K, VERL's own scorer: 1.0 when the number after the last '#### ' equals the ground truth.

This is `verl.utils.reward_score.gsm8k.compute_score` itself, the function VERL's trainer uses for rows
whose data_source is "openai/gsm8k". METHOD "strict" (the default) reads the number after '#### ', so it
also checks the answer format; "flexible" takes the last number of the response. VERL's file is loaded
on its own: importing the `verl` package would start Ray's and torch's imports in every sandbox.
"""
import importlib.util
import os

METHOD = "strict"  # or "flexible"


def _verl_gsm8k():
    spec = importlib.util.find_spec("verl")  # finds the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("VERL is not installed where this reward runs")
    path = os.path.join(list(spec.submodule_search_locations)[0], "utils", "reward_score", "gsm8k.py")
    module_spec = importlib.util.spec_from_file_location("verl_gsm8k_scorer", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


_GSM8K = _verl_gsm8k()


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return float(_GSM8K.compute_score(str(solution_str), str(ground_truth).strip(), method=METHOD))
