"""Stall detection (training.stall): the limit follows the recent step time, with a floor."""
import pytest

from training.stall import StallConfig, StallConfigError, check

T0 = 1_000_000.0


def test_limit_is_a_multiple_of_the_median_step_time_with_a_floor():
    cfg = StallConfig(factor=10, floor_s=60)
    steps = [T0 + 20 * i for i in range(10)]  # a step every 20 s -> limit 200 s
    assert check(cfg, steps[-1] + 199, T0, steps).stalled is False
    c = check(cfg, steps[-1] + 201, T0, steps)
    assert c.stalled and c.limit_s == 200 and c.step_s == 20 and c.idle_s == pytest.approx(201)
    fast = [T0 + i for i in range(10)]  # 1 s steps: the floor (60 s) wins over 10 s
    assert check(cfg, fast[-1] + 30, T0, fast).stalled is False
    assert check(cfg, fast[-1] + 61, T0, fast).stalled is True


def test_before_the_first_step_the_first_step_limit_counts_from_the_attempt_start():
    cfg = StallConfig(first_step_s=600)
    assert not check(cfg, T0 + 599, T0, []).stalled
    assert check(cfg, T0 + 601, T0, []).limit_s == 600 and check(cfg, T0 + 601, T0, []).stalled


def test_fixed_limit_and_disabled():
    steps = [T0 + 20 * i for i in range(10)]
    assert check(StallConfig(after_s=30), steps[-1] + 31, T0, steps).stalled
    assert not check(StallConfig(enabled=False, after_s=30), steps[-1] + 31, T0, steps).stalled


@pytest.mark.parametrize("raw, message", [({"action": "reboot"}, "action"), ({"factor": 0}, "factor"),
                                           ({"after_s": "soon"}, "numbers"), ({"colour": 1}, "unknown")])
def test_bad_stall_blocks_are_refused(raw, message):
    with pytest.raises(StallConfigError, match=message):
        StallConfig.from_dict(raw)
