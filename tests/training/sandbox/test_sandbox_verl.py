"""Existing VERL reward files work unchanged in the sandbox, VERL's own scorers included."""
from __future__ import annotations

import contextlib
import io
from concurrent.futures import ThreadPoolExecutor

import pytest

from training.sandbox import RewardSandbox, SandboxLimits, check_source

pytest.importorskip("verl")

ROWS = [
    ("openai/gsm8k", "Natalia sold 48 + 24 = 72 clips.\n#### 72", "72"),
    ("openai/gsm8k", "The total is #### 1,200", "1200"),
    ("openai/gsm8k", "I think it is 72.", "72"),  # no '####': VERL scores 0
    ("openai/gsm8k", "#### 71", "72"),
    ("lighteval/MATH", "So the answer is \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}"),
    ("lighteval/MATH", "\\boxed{3}", "4"),
    # prime_math compares with sympy in a child process (multiprocessing.Queue: needs /dev/shm)
    ("numina_synthetic_math", "Step 2: so $\\boxed{x^2+2x+1}$", "(x+1)^2"),
]

EXPECTED = [1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0]  # the rows exercise both outcomes
# prime_math gives its sympy child 10 s of wall clock, its own limit: on a machine kept busy the child can pass it, and
# VERL then prints this and scores 0 (in this process or in the sandbox alike).
VERL_TIMEOUT = "timed out after"

DEFAULT = "from verl.utils.reward_score import default_compute_score as compute_score\n"

WRAPPER = '''
from verl.utils.reward_score import gsm8k


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    score = gsm8k.compute_score(solution_str, ground_truth)
    return {"score": score, "has_answer": "####" in solution_str}
'''


@pytest.mark.slow
def test_verl_scorers_give_the_same_scores_in_the_sandbox_as_in_process():
    # each of the three imports of verl (two sandboxes, this process) takes seconds: overlap them
    # This compares scores, not speed: on a busy machine importing verl and prime_math's sympy child can pass
    # the default time limits (the limits have their own tests), so give them room.
    roomy = SandboxLimits(time_limit_s=60, load_time_limit_s=600)
    boxes = [RewardSandbox(DEFAULT, limits=roomy), RewardSandbox(WRAPPER, limits=roomy)]
    with ThreadPoolExecutor(2) as pool:
        started = [pool.submit(sb.start) for sb in boxes]
        from verl.utils.reward_score import default_compute_score, gsm8k
        for fut in started:
            fut.result()
    default_box, wrapper_box = boxes
    try:
        items = [{"data_source": d, "solution_str": s, "ground_truth": g, "extra_info": {"split": "test"}}
                 for d, s, g in ROWS]
        direct, direct_timed_out = [], []
        for d, s, g in ROWS:
            with contextlib.redirect_stdout(io.StringIO()) as printed:
                direct.append(float(default_compute_score(d, s, g, {"split": "test"})))
            direct_timed_out.append(VERL_TIMEOUT in printed.getvalue())
        res = default_box.score_batch(items)
        assert [r.error for r in res] == [None] * len(ROWS)
        for row, r in enumerate(res):  # the same score as in this process, unless VERL's own clock ran out
            for score, timed_out in ((r.score, VERL_TIMEOUT in (r.log or "")), (direct[row], direct_timed_out[row])):
                assert score == (0.0 if timed_out else EXPECTED[row]), (row, r.score, direct[row], r.log)

        gsm = [it for it in items if it["data_source"] == "openai/gsm8k"]
        res = wrapper_box.score_batch(gsm)
        assert [r.score for r in res] == [float(gsm8k.compute_score(it["solution_str"], it["ground_truth"]))
                                          for it in gsm]
        assert [r.extra for r in res] == [{"has_answer": True}, {"has_answer": True}, {"has_answer": False},
                                          {"has_answer": True}]
    finally:
        for sb in boxes:
            sb.close()


def test_check_source_accepts_verl_style_files():
    assert check_source(DEFAULT) == []
    assert [p for p in check_source(WRAPPER) if p.severity == "error"] == []
