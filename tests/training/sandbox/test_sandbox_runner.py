"""RewardSandbox behaviour: scores, dict returns, bad returns, errors, timeouts, crashes, reuse."""
from __future__ import annotations

import math
import os
import signal
import statistics
import threading
import time

import pytest

from tests.sandbox_gate import GATE_SOURCE, new_gate, open_gate
from training.sandbox import RewardLoadError, RewardSandbox, SandboxLimits, ScoreResult

EXACT = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return 1.0 if solution_str.strip() == ground_truth.strip() else 0.0
"""

# One reward that misbehaves on demand: the solution string picks the behaviour.
MISCHIEF = '''
import math, os, re, time

def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    s = solution_str
    if s == "nan":
        return float("nan")
    if s == "inf":
        return -math.inf
    if s == "str":
        return "1.0"
    if s == "none":
        return None
    if s == "dict":
        return {"score": 0.5, "acc": True}
    if s == "nodict":
        return {"acc": 1.0}
    if s == "raise":
        raise ValueError("bad answer format")  # line 19
    if s == "loop":
        while True:  # line 21
            pass
    if s == "swallow":
        while True:
            try:
                time.sleep(10)
            except BaseException:
                pass
    if s == "late":  # catches the watchdog's timeout once, then returns as if all was well
        try:
            while True:
                pass
        except BaseException:
            return 1.0
    if s == "regex":  # holds the GIL in C: only a kill stops it
        return float(bool(re.match(r"(a+)+$", "a" * 64 + "b")))
    if s == "exit":
        os._exit(3)
    if s == "sysexit":
        raise SystemExit(2)
    if s == "pid":
        return float(os.getpid())
    if s == "kwargs":
        return float(kwargs["bonus"])
    if s == "xcpu":  # what RLIMIT_CPU sends when the batch's CPU budget is spent
        os.kill(os.getpid(), 24)
    return 1.0
'''


def item(solution: str, gt: str = "x", **extra: object) -> dict:
    return {"data_source": "test", "solution_str": solution, "ground_truth": gt, "extra_info": extra or None}


@pytest.fixture(scope="module")
def mischief():
    with RewardSandbox(MISCHIEF, limits=SandboxLimits(time_limit_s=1.0, max_restarts=5)) as sb:
        yield sb


def test_it_scores_a_batch_in_order_and_reuses_the_process():
    with RewardSandbox(EXACT) as sb:
        res = sb.score_batch([item("a", "a"), item(" b ", "b"), item("c", "d")])
        assert [r.index for r in res] == [0, 1, 2]
        assert [r.score for r in res] == [1.0, 1.0, 0.0]
        assert all(isinstance(r, ScoreResult) and r.ok and r.duration_ms >= 0 for r in res)
        pid = sb._child.proc.pid
        assert [r.score for r in sb.score_batch([item("x", "x")])] == [1.0]
        assert sb._child.proc.pid == pid  # the same sandbox process serves every batch
        assert sb.score_batch([]) == []


def test_iter_scores_streams_results_before_the_batch_is_done():
    # the slow samples wait in the sandbox until the first result has reached us: a batch that is only
    # handed over whole never gets there, and its slow samples time out
    gate = new_gate()
    src = GATE_SOURCE + "import time\ndef compute_score(data_source, solution_str, ground_truth, extra_info=None):\n" \
        f"    if solution_str == 'slow':\n        _wait_at_gate({gate!r})\n        time.sleep(0.3)\n    return 1.0\n"
    with RewardSandbox(src, limits=SandboxLimits(time_limit_s=60)) as sb:
        it = sb.iter_scores([item("fast"), item("slow"), item("slow")])
        first = next(it)
        assert first.index == 0 and first.score == 1.0
        assert open_gate(gate)
        rest = list(it)
        assert [(r.index, r.score) for r in rest] == [(1, 1.0), (2, 1.0)], rest
        assert rest[0].duration_ms >= 250  # a slow call is timed on its own


def test_bad_returns_are_reported_per_sample(mischief):
    res = mischief.score_batch([item("ok"), item("nan"), item("inf"), item("str"), item("none"), item("ok")])
    assert res[0].score == 1.0 and res[5].score == 1.0
    assert res[1].score is None and "NaN" in res[1].error
    assert res[2].score is None and "-inf" in res[2].error
    assert res[3].score is None and "str" in res[3].error
    assert res[4].score is None and "None" in res[4].error


def test_dict_returns_keep_extra_keys_and_need_score(mischief):
    res = mischief.score_batch([item("dict"), item("nodict"), item("dict")])
    assert res[0].score == 0.5 and res[0].extra == {"acc": True} and res[0].ok
    assert res[1].score is None and "without a 'score' key" in res[1].error
    assert res[2].ok and res[2].extra == {"acc": True}


def test_a_sample_whose_keys_differ_from_the_first_is_reported(mischief):
    res = mischief.score_batch([item("ok"), item("dict"), item("ok")])
    assert res[0].ok and res[2].ok
    assert res[1].score is None and "same keys" in res[1].error and "a number" in res[1].error
    res = mischief.score_batch([item("dict"), item("ok")])  # each batch has its own reference
    assert res[0].ok and not res[1].ok and "'acc'" in res[1].error


def test_an_exception_is_reported_with_traceback_and_line(mischief):
    res = mischief.score_batch([item("raise"), item("ok")])
    assert res[0].error == "ValueError: bad answer format"
    assert res[0].lineno == 19
    assert 'File "reward.py", line 19, in compute_score' in res[0].traceback
    assert "runner" not in res[0].traceback and "_child" not in res[0].traceback
    assert res[1].score == 1.0


def test_a_python_loop_times_out_without_restarting_the_sandbox(mischief):
    mischief.score_batch([item("ok")])
    pid = mischief._child.proc.pid
    res = mischief.score_batch([item("loop"), item("ok")])
    assert res[0].error == "timed out after 1 s (time_limit_s)" and res[0].lineno in (21, 22)
    assert res[1].score == 1.0
    assert mischief._child.proc.pid == pid


def test_a_call_that_swallows_its_timeout_is_killed(mischief):
    res = mischief.score_batch([item("ok"), item("swallow"), item("ok")])
    assert [r.score for r in res] == [1.0, None, 1.0]
    assert "did not stop; the sandbox was restarted" in res[1].error


def test_a_call_that_returns_after_catching_its_timeout_still_fails(mischief):
    res = mischief.score_batch([item("ok")] * 100 + [item("late")] + [item("ok")] * 10)  # inside a group of calls
    assert res.errors == {100: "timed out after 1 s (time_limit_s)"}
    assert res.scores.count(1.0) == 110


def test_a_call_stuck_in_c_is_killed_and_only_that_sample_fails(mischief):
    # in a group of calls: the sandbox cannot say which one hung, so the rest is scored one call at a time
    res = mischief.score_batch([item("ok")] * 150 + [item("regex")] + [item("ok")] * 50)
    assert res.scores == [1.0] * 150 + [None] + [1.0] * 50
    assert "did not stop" in res[150].error


def test_a_crash_inside_a_group_of_calls_is_traced_to_its_sample():
    with RewardSandbox(MISCHIEF, limits=SandboxLimits(max_restarts=1)) as sb:
        sb.score_batch([item("ok")] * 600)  # the groups have grown
        res = sb.score_batch([item("ok")] * 250 + [item("exit")] + [item("ok")] * 349)
        assert res.errors == {250: "the sandbox process exited with code 3 (did the reward call os._exit?)"}
        assert res.scores.count(1.0) == 599  # finding it took a second restart, which max_restarts=1 allows


def test_big_batches_score_as_the_function_does_in_process():
    ns: dict = {}
    exec(EXACT, ns)  # noqa: S102 - our own test reward
    items = [{"data_source": f"src{i % 3}", "solution_str": str(i % 7), "ground_truth": str(i % 5),
              "extra_info": {"index": i} if i % 2 else None} for i in range(3000)]
    with RewardSandbox(EXACT) as sb:
        res = sb.score_batch(items)
        assert res.scores == [ns["compute_score"](**it) for it in items] and res.errors == {}
        assert [r.index for r in sb.iter_scores(items[:700])] == list(range(700))


def test_exact_timing_times_an_outlier_on_its_own():
    src = "import time\ndef compute_score(data_source, solution_str, ground_truth, extra_info=None):\n" \
          "    time.sleep(0.5 if solution_str == 'slow' else 0)\n    return 1.0\n"
    items = [item("fast")] * 40 + [item("slow")] + [item("fast")] * 40
    with RewardSandbox(src, exact_timing=True) as sb:
        durations = sb.score_batch(items).durations_ms
        # grouped, its 500 ms would be shared out across the group; alone, it keeps them all (and the others
        # only their own round trip, however slow a busy machine makes that)
        assert durations[40] >= 500 and statistics.median(durations[:40] + durations[41:]) < durations[40] / 10


def test_a_crash_is_reported_for_its_sample_and_the_rest_is_scored(mischief):
    res = mischief.score_batch([item("ok"), item("exit"), item("ok"), item("sysexit"), item("ok")])
    assert res[0].score == 1.0 and res[2].score == 1.0 and res[4].score == 1.0
    assert "exited with code 3" in res[1].error
    assert res[3].error == "called sys.exit(2)"


def test_after_max_restarts_the_rest_of_the_batch_is_not_scored():
    with RewardSandbox(MISCHIEF, limits=SandboxLimits(max_restarts=1)) as sb:
        res = sb.score_batch([item("exit"), item("exit"), item("ok"), item("ok")])
        assert "exited with code 3" in res[0].error and "exited with code 3" in res[1].error
        assert all("not scored" in r.error for r in res[2:])
        assert sb.score_batch([item("ok")])[0].score == 1.0  # the next batch starts afresh


def test_the_batch_time_limit_stops_a_slow_batch():
    src = "import time\ndef compute_score(data_source, solution_str, ground_truth, extra_info=None):\n" \
          "    time.sleep(3600 if solution_str == 'slow' else 0)\n    return 1.0\n"
    # each call may take 10 minutes, the batch 10 s: the batch limit is what stops it
    with RewardSandbox(src, limits=SandboxLimits(time_limit_s=600, batch_time_limit_s=10)) as sb:
        start = time.monotonic()
        res = sb.score_batch([item("fast"), item("fast")] + [item("slow")] * 4)
        assert time.monotonic() - start < 600
        assert res[0].score == 1.0 and res[1].score == 1.0
        assert res[-1].score is None and "batch_time_limit_s" in res[-1].error
        assert sb.score_batch([item("x")])[0].score == 1.0


def test_running_out_of_batch_cpu_fails_the_rest_of_the_batch_only(mischief):
    res = mischief.score_batch([item("ok"), item("xcpu"), item("ok"), item("ok")])
    assert res[0].score == 1.0
    assert all(r.score is None and "CPU time limit" in r.error for r in res[1:])
    assert mischief.score_batch([item("ok")])[0].score == 1.0
    mischief.score_batch([item("ok")] * 600)  # groups of calls: the signal handler names the call
    res = mischief.score_batch([item("ok")] * 100 + [item("xcpu")] + [item("ok")] * 50)
    assert res.scores[:100] == [1.0] * 100 and sorted(res.errors) == list(range(100, 151))


def test_async_compute_score_is_awaited():
    src = "import asyncio\nasync def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n" \
          "    await asyncio.sleep(0)\n    return {'score': float(len(solution_str)), 'n': len(ground_truth)}\n"
    with RewardSandbox(src) as sb:
        res = sb.score_batch([item("abc", "xy"), item("", "")])
        assert [(r.score, r.extra) for r in res] == [(3.0, {"n": 2}), (0.0, {"n": 0})]


def test_reward_kwargs_and_extra_info_reach_the_function():
    src = "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kw):\n" \
          "    return kw['bonus'] + extra_info['w'] + (0.5 if data_source == 'test' else 0)\n"
    with RewardSandbox(src, reward_kwargs={"bonus": 2.0}) as sb:
        assert sb.score_batch([item("a", w=1.0)])[0].score == 3.5


def test_numpy_like_and_bool_scores_become_floats():
    src = "import numpy as np\ndef compute_score(data_source, solution_str, ground_truth, extra_info=None):\n" \
          "    return np.float32(0.25) if solution_str == 'np' else solution_str == ground_truth\n"
    with RewardSandbox(src) as sb:
        res = sb.score_batch([item("np"), item("x", "x")])
        assert [r.score for r in res] == [0.25, 1.0]
        assert all(isinstance(r.score, float) and math.isfinite(r.score) for r in res)


@pytest.mark.parametrize("source,needle,lineno", [
    ("def compute_score(data_source, solution_str\n    return 1\n", "SyntaxError", 1),
    ("import no_such_module_xyz\n", "ModuleNotFoundError", 1),
    ("def other(data_source, solution_str, ground_truth):\n    return 1.0\n", "defines no 'compute_score'", None),
    ("compute_score = 3\n", "not a function", None),
])
def test_a_source_that_cannot_load_raises_a_clear_error(source, needle, lineno):
    with pytest.raises(RewardLoadError) as err, RewardSandbox(source):
        pass
    assert needle in str(err.value)
    assert err.value.lineno == lineno


def test_a_module_that_never_finishes_loading_times_out():
    with (pytest.raises(RewardLoadError, match="took longer than load_time_limit_s"),
          RewardSandbox("while True:\n    pass\n", limits=SandboxLimits(load_time_limit_s=0.5))):
        pass


def test_items_must_be_dicts():
    with RewardSandbox(EXACT) as sb, pytest.raises(TypeError, match="item 1 is a str"):
        sb.score_batch([item("a"), "not a dict"])


def test_limits_reject_bad_values_and_unknown_keys():
    with pytest.raises(ValueError, match="time_limit_s must be a positive number"):
        SandboxLimits(time_limit_s=0)
    with pytest.raises(ValueError, match="unknown sandbox limit"):
        SandboxLimits.from_dict({"time_limit": 5})
    assert SandboxLimits.from_dict({"time_limit_s": 2, "memory_mb": 512}).time_limit_s == 2


def test_a_sandbox_started_from_a_short_lived_thread_outlives_it():
    # bwrap --die-with-parent fires when the *thread* that started it exits
    sb = RewardSandbox(EXACT)
    worker = threading.Thread(target=sb.start)
    worker.start()
    worker.join()
    try:
        pid = sb._child.proc.pid
        time.sleep(0.2)
        assert sb.score_batch([item("a", "a")])[0].score == 1.0
        assert sb._child.proc.pid == pid
    finally:
        sb.close()


def test_a_sandbox_killed_while_idle_is_restarted_without_failing_a_sample():
    with RewardSandbox(EXACT) as sb:
        old = sb._child.proc
        os.killpg(old.pid, signal.SIGKILL)
        old.wait()
        res = sb.score_batch([item("a", "a"), item("b", "c")])
        assert [(r.score, r.error) for r in res] == [(1.0, None), (0.0, None)]
        assert sb._child.proc.pid != old.pid


def test_closing_kills_the_sandbox_process():
    sb = RewardSandbox(EXACT)
    sb.start()
    proc = sb._child.proc
    sb.close()
    assert proc.poll() is not None


def test_huge_extras_are_clipped_in_the_sandbox_before_they_reach_this_process(monkeypatch):
    """A 40 MB extra per sample: the child clips it per sample, so no message here is more than a few KB."""
    from training.sandbox import process

    seen: list[int] = []
    real_loads = process.loads
    monkeypatch.setattr(process, "loads", lambda line: (seen.append(len(line)), real_loads(line))[1])
    src = ("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
           "    return {'score': 1.0, 'blob': 'x' * (40 << 20), 'n': 3}\n")
    items = [{"data_source": "d", "solution_str": str(i), "ground_truth": "", "extra_info": None} for i in range(8)]
    # Each call builds and encodes 40 MB: a generous per-call limit, so that a busy machine does not time it out.
    with RewardSandbox(src, limits=SandboxLimits(max_extra_chars=1000, time_limit_s=60), exact_timing=True) as sb:
        res = sb.score_batch(items)
    assert [r.score for r in res] == [1.0] * 8 and all(r.error is None for r in res), [r.error for r in res]
    for r in res:
        assert r.extra["n"] == 3 and len(r.extra["blob"]) < 1000
        assert r.extra["blob"].startswith('"xxx') and r.extra["blob"].endswith("more characters]")
    assert max(seen) < 16_000


def test_too_many_extra_keys_fail_the_sample_not_the_batch():
    src = ("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
           "    return {'score': 1.0, **{f'k{i}': i for i in range(int(solution_str))}}\n")
    with RewardSandbox(src, limits=SandboxLimits(max_extra_chars=256)) as sb:
        small, many = sb.score_batch([{"data_source": "d", "solution_str": n, "ground_truth": "", "extra_info": None}
                                      for n in ("2", "5000")])
    assert small.score == 1.0 and many.error and "max_extra_chars=256" in many.error
