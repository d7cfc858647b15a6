"""Which categories the clean form ticks at first: never a set that drops every row (the demo's contamination
covers all of them), nor more than half the version; the rest ticked, in the report's order."""
from __future__ import annotations

from webapp.datasets.cleaning import suggested_categories


def test_a_category_covering_every_row_is_not_ticked():
    drops = {"near_duplicates": [3, 4], "exact_duplicates": [4], "contaminated": list(range(10)),
             "identical_pairs": []}
    notes, kept = suggested_categories(drops, 10)
    assert notes["near_duplicates"] == notes["exact_duplicates"] == ""
    assert "covers all 10 rows" in notes["contaminated"] and notes["identical_pairs"] == "no rows"
    assert kept == 8


def test_more_than_half_together_is_left_to_the_user():
    notes, kept = suggested_categories({"near_duplicates": [0, 1, 2], "contaminated": [3, 4, 5]}, 10)
    assert notes["near_duplicates"] == "" and "more than half" in notes["contaminated"]
    assert kept == 7
    notes, kept = suggested_categories({"near_duplicates": [0, 1], "contaminated": [1, 2, 3]}, 10)
    assert notes == {"near_duplicates": "", "contaminated": ""} and kept == 6
