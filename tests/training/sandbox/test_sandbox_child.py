"""The harness that runs inside the sandbox, driven here in-process (our own reward code, no sandbox):
groups of calls through map(), their slow path, and the messages they send."""
from __future__ import annotations

import functools
import math
import os
import time

import orjson
import pytest

from training.sandbox.isolation import harness_source


@pytest.fixture(scope="module")
def harness_ns() -> dict:
    ns: dict = {"__name__": "sandbox_harness"}  # not "__main__": main() must not run
    exec(compile(harness_source(), "<harness>", "exec"), ns)  # noqa: S102 - the harness itself, no user code
    return ns


def run(ns: dict, fn, sols: list, exact: bool = False, ds="d", ex=None, kwargs=None) -> tuple[list, list, dict]:
    """Score `sols` with `fn` in one piece; (scores, runs, errors by index) from the messages it sent."""
    limits = {"time_limit_s": 5, "load_time_limit_s": 5, "batch_time_limit_s": 60, "memory_mb": 1024}
    h = ns["Harness"]({"limits": limits})
    h.fn, h.positional = fn, ns["_binds_positionally"](fn)
    r, w = os.pipe()
    msg = {"offset": 0, "seq0": 2, "ds": ds, "sol": sols, "gt": [str(i) for i in range(len(sols))], "ex": ex,
           "kwargs": kwargs or {}, "exact": exact}
    h.run_batch(msg, w, False, True)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        messages = [orjson.loads(line) for line in f]
    assert messages[-1]["end"] is True and h.idx[0] == -1  # idle again
    scores, runs, errors = [], [], {}
    for m in messages:
        assert m["i0"] == len(scores)
        errors.update({m["i0"] + e[0]: e[1] for e in m.get("e", [])})
        scores += m["s"]
        runs += m["t"]
    assert sum(n for n, _ in runs) == len(scores) == len(sols)
    return scores, runs, errors


def exact_match(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    if solution_str == "boom":
        raise ValueError("boom")
    return 1.0 if solution_str == ground_truth else 0.0


class _SteadyClock:
    """`time` as the harness sees it, with a perf_counter that no busy machine can stall: every call is fast."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 1e-9
        return self.now

    def __getattr__(self, name: str):
        return getattr(time, name)


def test_a_big_piece_runs_in_growing_groups_and_one_bad_call_fails_alone(harness_ns, monkeypatch):
    # the group size follows how long calls take; a preempted group would start it again from one
    monkeypatch.setitem(harness_ns, "time", _SteadyClock())
    sols = [str(i) if i % 3 else "x" for i in range(600)]
    sols[301] = "boom"
    scores, runs, errors = run(harness_ns, exact_match, sols)
    assert errors == {301: "ValueError: boom"}
    want = [None if i == 301 else (1.0 if i % 3 else 0.0) for i in range(600)]
    assert scores == want
    assert len(runs) < 30  # groups, not one call at a time
    assert max(n for n, _ in runs) >= 64


def test_exact_mode_runs_and_times_every_call_on_its_own(harness_ns):
    scores, runs, _ = run(harness_ns, exact_match, ["0", "1", "x"], exact=True)
    assert scores == [1.0, 1.0, 0.0] and [n for n, _ in runs] == [1, 1, 1]


def test_returns_that_are_not_finite_floats_take_the_slow_path_in_place(harness_ns):
    values = [1.0, 2, True, {"score": 0.5, "acc": 1}, "bad", float("nan"), 0.25]

    def reward(data_source, solution_str, ground_truth, extra_info=None):
        return values[int(ground_truth)]

    scores, _, errors = run(harness_ns, reward, ["s"] * len(values))
    assert scores == [1.0, 2.0, 1.0, 0.5, None, None, 0.25]
    assert set(errors) == {4, 5} and "returned a str" in errors[4] and "NaN" in errors[5]


def test_a_reward_with_its_own_parameter_order_is_called_by_keyword(harness_ns):
    def reward(solution_str, ground_truth, data_source=None, extra_info=None, bonus=0.0):
        return float(solution_str == "s") + float(data_source == "d") + float(extra_info == {"k": 1}) + bonus

    assert harness_ns["_binds_positionally"](reward) is False
    scores, _, _ = run(harness_ns, reward, ["s", "t"], ex=[{"k": 1}, None], kwargs={"bonus": 0.5})
    assert scores == [3.5, 1.5]
    positional = functools.partial(exact_match)  # not a plain function: keywords too
    assert harness_ns["_binds_positionally"](positional) is False
    scores, _, _ = run(harness_ns, exact_match, ["0", "1"], ds=["a", "b"], kwargs={"unused": 1})
    assert scores == [1.0, 1.0]
    # a reward kwarg named like one of the four arguments does not override them (as in VERL)
    scores, _, _ = run(harness_ns, reward, ["s"], ex=[{"k": 1}], kwargs={"data_source": "x", "bonus": 1.0})
    assert scores == [4.0]
    scores, _, _ = run(harness_ns, exact_match, ["0"], kwargs={"solution_str": "no"})
    assert scores == [1.0]


def test_positional_calls_only_for_plain_functions_with_the_contract_names(harness_ns):
    binds = harness_ns["_binds_positionally"]

    def wrapped(*args, **kwargs):
        return exact_match(**kwargs)

    def posonly(data_source, solution_str, ground_truth, extra_info, /):
        return 0.0

    class Scorer:
        def __call__(self, data_source, solution_str, ground_truth, extra_info=None):
            return 0.0

    assert binds(exact_match) is True
    assert not any(binds(f) for f in (functools.wraps(exact_match)(wrapped), posonly, Scorer(), len,
                                      lambda data_source, solution_str, ground_truth: 0.0))


def test_the_finite_float_check(harness_ns):
    check = harness_ns["_finite_floats"]
    assert check([]) and check([1.0, 0.0, -3.5])
    assert not check([1.0, 1]) and not check([True]) and not check([1.0, math.nan]) and not check([-math.inf])
    assert not check([1e308, 1e308])  # the sum overflows: the slow path then checks each value
