"""What reward code prints is kept with the sample it printed for: per sample and per batch caps, in a single
sandbox (calls in groups, or one at a time) and in a pool, errors included."""
from __future__ import annotations

import time

import pytest

from training.sandbox import RewardSandbox, SandboxLimits, SandboxPool
from training.sandbox.protocol import LogBudget

PRINTS = '''
import logging, os, sys
print("loading the module")
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    if solution_str == "quiet":
        return 0.5
    if solution_str == "big":
        print("x" * 5000)
    if solution_str == "boom":
        print("about to fail on", solution_str)
        raise ValueError("boom")
    if solution_str == "fd":
        os.write(2, b"straight to fd 2\\n")
    print("scored", solution_str, "against", ground_truth)
    logging.info("via logging: %s", solution_str)
    sys.stderr.write("to stderr\\n")
    return float(solution_str == ground_truth)
'''
SOLUTIONS = ["7", "quiet", "3", "boom", "big"]


def items(solutions):
    return [{"data_source": "d", "solution_str": s, "ground_truth": "7", "extra_info": None} for s in solutions]


def expected_log(s: str) -> str:
    return f"scored {s} against 7\nINFO via logging: {s}\nto stderr\n"


@pytest.mark.parametrize("exact", [False, True])
def test_each_samples_output_is_kept_with_its_result(exact):
    with RewardSandbox(PRINTS, exact_timing=exact) as sb:
        res = sb.score_batch(items(SOLUTIONS * 10))  # 50: calls run in groups unless exact
        assert sb.load_log == "loading the module\n"
    for r in res:
        s = SOLUTIONS[r.index % 5]
        if s == "quiet":
            assert r.log is None and r.score == 0.5
        elif s == "boom":
            assert r.error == "ValueError: boom" and r.log == "about to fail on boom\n"
        elif s == "big":
            assert r.log.startswith("x" * 1000) and r.log.endswith("… [output cut]")
            assert len(r.log) == 2000 + len("… [output cut]")  # max_log_chars
        else:
            assert r.log == expected_log(s) and r.score == float(s == "7")


def test_writes_straight_to_the_file_descriptor_are_not_attributed_but_kept_for_errors():
    with RewardSandbox(PRINTS) as sb:
        res = sb.score_batch(items(["fd", "7"]))
        deadline = time.monotonic() + 120
        while "straight to fd 2" not in sb._child.stderr_text() and time.monotonic() < deadline:
            time.sleep(0.05)  # the stderr tail is drained by a thread
        tail = sb._child.stderr_text()
    assert res[0].log == expected_log("fd") and "straight to fd 2" in tail


def test_the_batch_keeps_at_most_max_batch_log_chars_of_output_and_says_so():
    limits = SandboxLimits(max_log_chars=100, max_batch_log_chars=120)  # a sample prints 49 characters
    with RewardSandbox(PRINTS, limits=limits) as sb:
        res = sb.score_batch(items(["7", "3", "7", "3"]))
    kept = [r.log for r in res]
    assert kept[:2] == [expected_log("7"), expected_log("3")]
    assert kept[2] == expected_log("7")[:22] + "… [output cut]" and kept[3] == LogBudget.NOTE


def test_a_pools_shards_share_one_batch_budget():
    limits = SandboxLimits(max_log_chars=100, max_batch_log_chars=300)
    with SandboxPool(PRINTS, limits=limits, size=2) as pool:
        batch = pool.score_batch(items(["7", "3"] * 20))  # each shard alone would keep 300 characters
        streamed = list(pool.iter_scores(items(["7", "3"] * 20)))
    for results in (list(batch), streamed):
        logs = [r.log for r in results]
        assert logs[0] == expected_log("7")
        assert sum(len(x) for x in logs if x and x != LogBudget.NOTE) <= 300 + 20
        assert logs[-1] == LogBudget.NOTE


def test_no_output_is_kept_when_max_log_chars_is_0():
    with RewardSandbox(PRINTS, limits=SandboxLimits(max_log_chars=0)) as sb:
        res = sb.score_batch(items(["7", "boom"]))
    assert [r.log for r in res] == [None, None] and res[0].score == 1.0
