"""A reward runs in the same process as the harness, so it can write to the result pipe or patch the harness.

With exact timing (test-runs) the calling side must still only report what it observed itself: each
sample's time on its own clock, and only the one result it asked for; anything else fails the batch."""
from __future__ import annotations

import pytest

from training.sandbox import RewardSandbox

# The solution string picks the forgery; extra_info["i"] is the sample's index in the batch.
FORGER = '''
import gc, sys, time

def _harness():
    return next(o for o in gc.get_objects() if type(o).__name__ == "Harness")

def _send(line):
    import os
    os.write(_harness().out_fd, line.encode() + b"\\n")

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    i = extra_info["i"]
    if solution_str == "patch":  # every result message the harness sends claims 0.001 ms per call
        g = sys.modules["__main__"].__dict__
        if not getattr(g["_chunk_message"], "forged", False):
            real = g["_chunk_message"]
            def forged(st, *args):
                for run in st[1]:
                    run[1] = run[0] * 1e-6
                return real(st, *args)
            forged.forged = True
            g["_chunk_message"] = forged
        time.sleep(0.05)
    elif solution_str == "early":  # answers for itself at once (0.001 ms), then takes 50 ms
        _send('{"i0":%d,"s":[1.0],"t":[[1,1e-6]],"end":true,"cpu":0.0}' % i)
        time.sleep(0.05)
    elif solution_str == "later":  # answers for the whole batch while the first sample runs
        n = extra_info["n"]
        _send('{"i0":%d,"s":%s,"t":[[%d,1e-6]],"end":true,"cpu":0.0}' % (i, [0.5] * (n - i), n - i))
    elif solution_str == "unasked":  # a result for the next sample, before it was asked for
        _send('{"i0":%d,"s":[0.5],"t":[[1,1e-6]]}' % (i + 1))
    elif solution_str == "garbage":  # bytes that are no message at all
        _send("not a result")
    return 1.0
'''

TAMPERED = "the reward wrote to the sandbox's result channel"


def items(kind: str, n: int = 3) -> list[dict]:
    return [{"data_source": "t", "solution_str": kind, "ground_truth": "x", "extra_info": {"i": i, "n": n}}
            for i in range(n)]


@pytest.fixture(scope="module")
def forger():
    with RewardSandbox(FORGER, exact_timing=True) as sb:
        yield sb


def test_a_reward_that_patches_the_harness_cannot_shorten_its_reported_time():
    with RewardSandbox(FORGER, exact_timing=True) as sb:
        res = sb.score_batch(items("patch"))
        assert res.errors == {}
        assert min(res.durations_ms) >= 50  # timed by the calling side: the 50 ms sleep, not the claimed 0.001 ms


@pytest.mark.parametrize("kind", ["early", "later", "unasked", "garbage"])
def test_a_forged_result_line_fails_the_batch_loudly(forger, kind):
    res = forger.score_batch(items(kind))
    assert all(r.score is None and r.error is not None and TAMPERED in r.error for r in res), list(res)
    # the sandbox that was tampered with is replaced: the next batch is scored normally
    ok = forger.score_batch(items("plain"))
    assert ok.errors == {} and ok.scores == [1.0, 1.0, 1.0]


def test_an_honest_slow_reward_keeps_its_own_time():
    src = "import time\ndef compute_score(data_source, solution_str, ground_truth, extra_info=None):\n" \
          "    time.sleep(1.0 if extra_info['i'] == 1 else 0)\n    return 1.0\n"
    with RewardSandbox(src, exact_timing=True) as sb:
        d = sb.score_batch(items("plain")).durations_ms
        # its whole second is its own: not shared out, not put on a neighbour (however slow the round trips)
        assert d[1] >= 1000 and d[0] < d[1] - 500 and d[2] < d[1] - 500, d
