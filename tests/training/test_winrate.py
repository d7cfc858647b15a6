"""Win-rate maths: outcomes with a tie tolerance, the rate, and Wilson's interval."""
from __future__ import annotations

import math

import pytest

from training import winrate


def test_outcome_win_tie_loss_and_missing():
    assert winrate.outcome(1.0, 0.0) == 1.0
    assert winrate.outcome(0.0, 1.0) == 0.0
    assert winrate.outcome(0.5, 0.5 + 1e-9) == 0.5
    assert winrate.outcome(0.5, 0.6, tie_tolerance=0.2) == 0.5
    assert winrate.outcome(None, 1.0) is None
    assert winrate.outcome(float("nan"), 1.0) is None


def test_win_rate_counts_ties_as_half_and_skips_missing():
    assert winrate.win_rate([1.0, 0.5, 0.0, None]) == pytest.approx(0.5)
    assert winrate.win_rate([None]) is None


def test_wilson_interval_matches_the_formula():
    # 8 of 10, z = 1.96: centre (0.8 + 0.19208)/1.38416, half 1.96*sqrt(0.016 + 0.009604)/1.38416
    lo, hi = winrate.wilson_interval(8, 10)
    centre = (0.8 + 1.96**2 / 20) / (1 + 1.96**2 / 10)
    half = 1.96 * math.sqrt(0.8 * 0.2 / 10 + 1.96**2 / 400) / (1 + 1.96**2 / 10)
    assert (lo, hi) == pytest.approx((centre - half, centre + half))
    assert (lo, hi) == pytest.approx((0.4902, 0.9433), abs=1e-4)


def test_wilson_interval_edges():
    lo, hi = winrate.wilson_interval(0, 5)
    assert lo == 0.0 and 0 < hi < 0.5
    lo, hi = winrate.wilson_interval(5, 5)
    assert hi == 1.0 and 0.5 < lo < 1
    assert winrate.wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        winrate.wilson_interval(6, 5)


def test_summary_narrows_with_more_pairs():
    small = winrate.summarize([1.0, 0.0] * 5)
    large = winrate.summarize([1.0, 0.0] * 500)
    assert small.rate == large.rate == 0.5 and small.n == 10 and large.n == 1000
    assert (large.hi - large.lo) < (small.hi - small.lo)
    assert winrate.summarize([None]).n == 0
