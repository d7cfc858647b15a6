"""Judge maths: W/T/L counts, swapped-order consistency, the seeded bootstrap interval."""
from __future__ import annotations

import pytest

from training import winrate


def test_counts_keep_wins_ties_and_losses_apart():
    c = winrate.counts([1.0, 1.0, 0.5, 0.0, None])
    assert (c.wins, c.ties, c.losses, c.n) == (2, 1, 1, 4)


@pytest.mark.parametrize("first, second, expected", [
    (1.0, 1.0, (1.0, True)),     # the same verdict in both orders
    (0.0, 0.0, (0.0, True)),
    (0.5, 0.5, (0.5, True)),
    (1.0, 0.0, (0.5, False)),    # followed the position: a tie, inconsistent
    (0.0, 1.0, (0.5, False)),
    (1.0, 0.5, (0.5, False)),
    (1.0, None, (None, None)),   # one order has no verdict: the pair is unjudged
    (None, None, (None, None)),
])
def test_swap_consistency(first, second, expected):
    assert winrate.swap_consistent(first, second) == expected


def test_bootstrap_is_seeded_and_brackets_the_rate():
    outcomes = [1.0] * 7 + [0.0] * 3
    a = winrate.bootstrap_interval(outcomes, resamples=2000, seed=3)
    assert a == winrate.bootstrap_interval(outcomes, resamples=2000, seed=3)
    lo, hi = a
    # normal approximation: 0.7 ± 1.96·sqrt(0.21/10) = [0.42, 0.98]; the percentile bootstrap on 10 draws
    # moves in steps of 0.1
    assert 0.35 <= lo <= 0.5 and 0.9 <= hi <= 1.0
    assert lo < 0.7 < hi


def test_bootstrap_narrows_with_more_pairs_and_is_degenerate_for_one_answer():
    few = winrate.bootstrap_interval([1.0, 0.0] * 5, seed=1)
    many = winrate.bootstrap_interval([1.0, 0.0] * 200, seed=1)
    assert (many[1] - many[0]) < (few[1] - few[0]) / 3
    assert winrate.bootstrap_interval([1.0] * 5) == (1.0, 1.0)
    assert winrate.bootstrap_interval([None]) == (None, None)
    with pytest.raises(ValueError):
        winrate.bootstrap_interval([1.0], resamples=0)


def test_summarize_swapped_counts_position_bias():
    pairs = [(1.0, 1.0), (1.0, 1.0), (0.0, 0.0), (1.0, 0.0), (0.0, 1.0), (0.5, 0.5), (None, 1.0)]
    s = winrate.summarize_swapped(pairs, resamples=500, seed=0)
    assert (s.counts.wins, s.counts.ties, s.counts.losses) == (2, 3, 1)
    assert s.judged == 6 and s.unjudged == 1 and s.inconsistent == 2
    assert s.first_position == 1  # (1, 0): the response shown first won both times
    assert s.position_bias_share == pytest.approx(2 / 6)
    assert s.rate == pytest.approx((2 + 1.5) / 6)
    assert s.lo <= s.rate <= s.hi


def test_summarize_swapped_with_nothing_judged():
    s = winrate.summarize_swapped([(None, None)])
    assert s.rate is None and s.lo is None and s.position_bias_share is None and s.unjudged == 1
