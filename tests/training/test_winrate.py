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


def test_the_demo_case_shows_its_ties_rule_and_accuracy():
    # 1 of 4 prompts right, the reference wrong on all 4: three "both wrong" ties and one win
    rows = [{"win": 1.0, "score": 1.0, "gts": "3"}] + [{"win": 0.5, "score": 0.0, "gts": "3"}] * 3
    summary = winrate.summarize(r["win"] for r in rows)
    assert summary.rate == pytest.approx(0.625)  # the rate the issue found misleading...
    assert (summary.wins, summary.ties, summary.losses) == (1, 3, 0)  # ...now always shown with its parts
    assert summary.share("win") == 0.25 and summary.share("tie") == 0.75 and summary.share("loss") == 0
    assert summary.decisive == 1 and summary.decisive_share == 1.0
    assert winrate.accuracy(rows) == (0.25, 4)
    assert summary.wide and "only 4 judged pairs" in summary.note
    assert "half a win" in winrate.TIE_RULE


def test_counts_split_fractional_outcomes_by_side_of_a_half():
    assert winrate.count_outcomes([1.0, 0.75, 0.5, 0.25, 0.0, None, float("nan")]) == (2, 1, 2)
    assert winrate.classify(None) is None and winrate.classify(0.5) == "tie"
    assert winrate.summarize([0.5, 0.5]).decisive_share is None  # every pair tied: no decisive share


def test_wide_intervals_are_said_in_words():
    assert winrate.precision_note(0, None, None) == "No judged pairs yet."
    narrow = winrate.summarize([1.0, 0.0] * 100)  # n=200: ±7 points
    assert not narrow.wide and narrow.note == ""
    few = winrate.summarize([1.0, 0.0] * 10)  # n=20 < 30
    assert few.wide and "only 20 judged pairs" in few.note and "from" in few.note
    # enough pairs but a wide interval still warns (half-width above 0.15)
    assert winrate.is_wide(40, 0.2, 0.55) and not winrate.is_wide(40, 0.4, 0.6)


def test_accuracy_uses_the_rewards_acc_else_a_full_score_and_needs_a_ground_truth():
    rows = [{"score": 1.0, "gts": "a"}, {"score": 0.5, "gts": "b"}, {"score": 0.2, "acc": True, "gts": "c"},
            {"score": 1.0, "gts": None}, {"score": 1.0, "gts": ""}, {"score": None, "gts": "d"}]
    assert winrate.accuracy(rows) == (pytest.approx(2 / 3), 3)
    assert winrate.accuracy([{"score": 1.0}]) == (None, 0)


def test_validation_metrics_per_source_on_both_backends_rows():
    nan = float("nan")
    rows = [{"data_source": "a", "win": 1.0, "score": 1.0, "gts": "1"},
            {"data_source": "a", "win": 0.5, "score": 0.0, "gts": "1"},
            {"data_source": "a", "win": 0.0, "score": 0.0, "gts": "1"},
            {"win": nan, "score": 1.0, "gts": "2", "acc": 1.0}]  # a VERL row: no reference (NaN), no source
    m = winrate.validation_metrics(rows)
    names = winrate.metric_names("a")
    assert m[names["rate"]] == pytest.approx(0.5) and m[names["n"]] == 3
    assert (m[names["wins"]], m[names["ties"]], m[names["losses"]]) == (1, 1, 1)
    assert m[names["accuracy"]] == pytest.approx(1 / 3) and m[names["accuracy_n"]] == 3
    assert winrate.metric_names("default")["rate"] not in m  # no judged pair in "default"
    assert m["val-core/default/accuracy"] == 1.0
