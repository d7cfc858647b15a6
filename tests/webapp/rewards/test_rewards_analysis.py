from __future__ import annotations

import math

import pytest

from webapp.rewards.analysis import diff_lines, diff_stats, normalize_source, pair_summary, source_sha256, summarize


def test_summary_by_hand():
    s = summarize([1.0, 0.0, None, 0.0, 3.0])
    # scored: 1, 0, 0, 3 -> mean 1, population variance (0 + 1 + 1 + 4) / 4 = 1.5
    assert s["n"] == 5 and s["scored"] == 4 and s["errors"] == 1
    assert s["mean"] == pytest.approx(1.0) and s["std"] == pytest.approx(math.sqrt(1.5))
    assert s["zero_share"] == pytest.approx(0.5) and (s["min"], s["max"]) == (0.0, 3.0)


def test_summary_of_only_failures_has_no_statistics():
    assert summarize([None, None]) == {"n": 2, "scored": 0, "errors": 2, "mean": None, "std": None,
                                       "min": None, "max": None, "zero_share": None}


def test_pair_summary_counts_wins_ties_and_skips_failed_pairs():
    p = pair_summary([1.0, 0.5, 0.0, None], [0.0, 0.5, 1.0, 1.0])
    assert p == {"pairs": 3, "chosen_higher": 1, "ties": 1, "rejected_higher": 1, "chosen_win_rate": 1 / 3}


def test_hash_ignores_line_ending_style_only():
    assert source_sha256("a\r\nb\n") == source_sha256("a\nb\n") != source_sha256("a\nb")
    assert normalize_source("x\ry") == "x\ny"


def test_diff_lines_have_numbers_and_kinds():
    old = "a\nb\nc\n"
    new = "a\nB\nc\nd\n"
    lines = diff_lines(old, new)
    kinds = [(d.kind, d.old_no, d.new_no, d.text) for d in lines]
    assert kinds[0][0] == "hunk"
    assert ("del", 2, None, "b") in kinds and ("add", None, 2, "B") in kinds
    assert ("add", None, 4, "d") in kinds and ("same", 1, 1, "a") in kinds
    assert diff_stats(lines) == {"added": 2, "removed": 1}


def test_identical_sources_have_no_diff():
    assert diff_lines("x = 1\n", "x = 1\r\n") == []
