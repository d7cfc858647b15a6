"""SandboxPool: a batch split over several sandboxes scores as one sandbox would, and a bad call stays alone."""
from __future__ import annotations

import time

import pytest

from training.sandbox import RewardSandbox, SandboxLimits, SandboxPool, pool_size
from training.sandbox.pool import cpu_count, shards

VARIED = '''
import os, random, time

ME = float(random.SystemRandom().randrange(1 << 30))  # one number per sandbox process (pids repeat in namespaces)

def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    s = solution_str
    if s == "raise":
        raise ValueError("no answer")
    if s == "hang":  # a Python loop: the per-call watchdog stops it
        while True:
            pass
    if s == "stuck":  # swallows every timeout: only killing its sandbox stops it
        while True:
            try:
                time.sleep(10)
            except BaseException:
                pass
    if s == "crash":
        os._exit(3)
    if s == "slow":
        time.sleep(0.5)
    if s == "dict":
        return {"score": 0.25, "acc": 1.0}
    if s == "who":
        time.sleep(0.002)
        return ME
    return float(len(s) % 3) + (1.0 if s == ground_truth else 0.0)
'''


def item(solution: str, gt: str = "x") -> dict:
    return {"data_source": "test", "solution_str": solution, "ground_truth": gt, "extra_info": {"n": len(solution)}}


def outcome(batch) -> list[tuple]:
    return [(r.index, r.score, r.error, r.extra) for r in batch]


LIMITS = SandboxLimits(time_limit_s=1.0, max_restarts=5)


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(VARIED, limits=LIMITS, size=3) as p:
        yield p


def test_the_pool_gives_the_scores_of_one_sandbox_in_the_batch_order(pool):
    items = [item("a" * (i % 7), "aa") for i in range(600)] + [item("raise")] + [item("b" * i) for i in range(40)]
    with RewardSandbox(VARIED, limits=LIMITS) as one:
        serial = one.score_batch(items)
    pooled = pool.score_batch(items)
    assert len(shards(len(items), pool.size)) > pool.size  # the batch really was cut and shared out
    assert outcome(pooled) == outcome(serial)
    assert [r.index for r in pooled] == list(range(len(items)))
    assert pooled[600].error == "ValueError: no answer" and pooled.scores[600] is None
    assert {s for s in pooled.scores if s is not None} == {0.0, 1.0, 2.0, 3.0}  # the rows differ in score
    streamed = list(pool.iter_scores(items))
    assert outcome(streamed) == outcome(serial)


def test_every_member_is_its_own_sandbox_process(pool):
    who = {r.score for r in pool.score_batch([item("who") for _ in range(300)])}
    assert len(who) == pool.size  # three processes scored the batch (each took shards)
    assert len({m._child.proc.pid for m in pool.members}) == pool.size
    assert pool.mode in ("bubblewrap", "rlimits")


def test_a_hanging_call_times_out_alone_while_its_neighbours_score(pool):
    items = [item("ok" + "!" * (i % 5)) for i in range(200)]
    items[37], items[150] = item("hang"), item("stuck")
    before = [m._child.proc.pid for m in pool.members]
    t0 = time.monotonic()
    res = pool.score_batch(items)
    took = time.monotonic() - t0
    errors = {i: r.error for i, r in enumerate(res) if r.error}
    assert set(errors) == {37, 150}
    assert "timed out after 1 s" in errors[37] and "timed out after 1 s" in errors[150]
    expected = [float(len(it["solution_str"]) % 3) for it in items]
    assert [s for i, s in enumerate(res.scores) if i not in errors] == [e for i, e in enumerate(expected)
                                                                           if i not in errors]
    after = [m._child.proc.pid if m._child else None for m in pool.members]
    assert sum(a != b for a, b in zip(before, after, strict=True)) <= 1  # only the stuck call's sandbox was killed
    assert took < LIMITS.batch_time_limit_s  # two 1 s limits (and one restart), not the batch limit
    assert pool.score_batch([item("ok")]).scores == [2.0]  # the pool is whole again


def test_a_crashing_call_only_fails_itself(pool):
    items = [item("c" * (i % 4)) for i in range(120)]
    items[64] = item("crash")
    res = pool.score_batch(items)
    assert [i for i, r in enumerate(res) if r.error] == [64]
    assert "exited with code 3" in res[64].error
    assert res.scores[63] == 0.0 and res.scores[65] == 1.0 and res.scores[119] == 0.0


def test_keys_are_checked_over_the_whole_batch_as_one_sandbox_would(pool):
    items = [item("n" * (i % 2)) for i in range(300)] + [item("dict")]  # the dict comes in a later shard
    res = pool.score_batch(items)
    assert res[300].score is None and "same keys" in res[300].error and "sample 0" in res[300].error
    with RewardSandbox(VARIED, limits=LIMITS) as one:
        assert outcome(res) == outcome(one.score_batch(items))
    res = pool.score_batch([item("dict")] * 100)
    assert all(r.ok and r.extra == {"acc": 1.0} for r in res)


def test_slowest_samples_are_named_with_their_own_time():
    items = [item("f" * (i % 3)) for i in range(24)]
    items[5], items[17] = item("slow"), item("slow")
    with SandboxPool(VARIED, limits=LIMITS, size=2, exact_timing=True) as p:
        res = p.score_batch(items)
    slow = res.slowest(3)
    assert {i for i, _ in slow[:2]} == {5, 17}
    assert all(ms >= 450 for _, ms in slow[:2]) and slow[0][1] >= slow[1][1] >= slow[2][1]
    assert res.durations_ms[slow[2][0]] == slow[2][1] and res.scores[5] == res.scores[17] == 1.0


TIMED = '''
import multiprocessing, signal

def _slow(q, n):
    q.put(sum(range(n + 1)))

def _alarm(signum, frame):
    raise TimeoutError("too slow")

def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    if solution_str == "alarm":  # a signal-based timeout of the reward's own (SIGALRM, main thread)
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        try:
            while True:
                pass
        except TimeoutError:
            return 0.5
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
    # a timeout in a child process through a multiprocessing.Queue, as VERL's timeout_limit (prime_math)
    q = multiprocessing.Queue(maxsize=1)
    p = multiprocessing.Process(target=_slow, args=(q, int(solution_str)))
    p.start()
    p.join(timeout=5)
    if p.is_alive():
        p.terminate()
        return -1.0
    return float(q.get(timeout=1) > 0)
'''


def test_a_rewards_own_timeouts_work_in_the_pool():
    items = [item(str(i)) for i in range(12)]
    items[3] = item("alarm")
    with SandboxPool(TIMED, limits=LIMITS, size=2) as p:
        res = p.score_batch(items)
    assert [r.error for r in res] == [None] * 12
    assert res.scores == [0.0, 1.0, 1.0, 0.5] + [1.0] * 8


def test_the_batch_time_limit_covers_the_whole_pool_batch():
    slow = ("import time\ndef compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
            "    time.sleep(0 if solution_str == '0' else 1.0)\n    return 1.0\n")
    with SandboxPool(slow, limits=SandboxLimits(time_limit_s=60, batch_time_limit_s=2.0), size=2) as p:
        t0 = time.monotonic()
        res = p.score_batch([item(str(i)) for i in range(80)])  # 79 s of calls over two sandboxes
        took = time.monotonic() - t0
        errors = [r.error for r in res if r.error]
        assert 0 < len(errors) < 80 and all("batch_time_limit_s" in e for e in errors)
        assert res.scores[0] == 1.0 and res.scores[-1] is None  # the start was scored, the rest refused
        assert took < 20  # one limit for the batch: the calls alone take 40 s on two sandboxes
        assert p.score_batch([item("again")]).scores == [1.0]  # the next batch has its own limit


def test_the_pool_size_comes_from_the_cpu_budget():
    assert pool_size(None) == min(cpu_count(), 4)
    assert pool_size(8) == 8
    assert pool_size(8, share=4) == 2  # VERL: the budget spread over its reward workers
    assert pool_size(3, share=4) == 1
    for bad in (0, -1, 65, 2.5, True, "4"):
        with pytest.raises(ValueError, match="reward_workers"):
            pool_size(bad)  # type: ignore[arg-type]
    with SandboxPool("def compute_score(**kw):\n    return 1.0\n", size=2) as p:
        assert p.size == 2 and len(p.members) == 2
        assert p.score_batch([]) == []


def test_a_source_that_cannot_load_fails_the_pool_start():
    from training.sandbox import RewardLoadError

    with pytest.raises(RewardLoadError, match="ZeroDivisionError"):
        SandboxPool("1 / 0\n", size=2).start()


def test_items_must_be_dicts(pool):
    with pytest.raises(TypeError, match="item 1 is a str"):
        pool.score_batch([item("a"), "b"])
