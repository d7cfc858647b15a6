"""Pure figure builders of the stats page."""
from __future__ import annotations

from webapp.datasets import charts


def test_histogram_bins_on_the_server_with_shared_edges():
    fig = charts.histogram({"chosen": list(range(100)), "rejected": [5] * 10}, title="T", xaxis="chars", bins=10)
    chosen, rejected = fig["data"]
    assert chosen["x"] == rejected["x"] and len(chosen["x"]) == 10
    assert sum(chosen["y"]) == 100 and sum(rejected["y"]) == 10 and rejected["y"][0] == 10
    assert fig["layout"]["barmode"] == "overlay" and fig["layout"]["title"]["text"] == "T"


def test_small_integer_ranges_get_one_bar_per_value_and_empty_series_are_dropped():
    fig = charts.histogram({"prompt": [1, 2, 2, 3], "none": []}, title="t", xaxis="x")
    assert [t["name"] for t in fig["data"]] == ["prompt"]
    assert fig["data"][0]["x"] == [1.0, 2.0, 3.0] and fig["data"][0]["y"] == [1, 2, 1]
    assert charts.histogram({}, title="t", xaxis="x")["data"] == []


def test_length_difference_flags_longer_chosen_answers():
    fig, stats = charts.length_difference([10, 20, 30, 5], [5, 5, 30, 9])
    assert stats == {"pairs": 4, "mean": 4.0, "chosen_longer": 0.5, "rejected_longer": 0.25}
    assert "chosen longer in 50% of pairs" in fig["layout"]["title"]["text"] and fig["layout"]["shapes"][0]["x0"] == 0


def test_bar_sorts_and_folds_the_tail():
    fig = charts.bar({"a": 1, "b": 5, "": 3, "c": 2}, title="s", limit=3)
    assert fig["data"][0]["x"] == ["b", "(none)", "other"] and fig["data"][0]["y"] == [5, 3, 3]


def test_summary():
    assert charts.summary([]) == {"count": 0, "mean": 0.0, "median": 0.0, "p95": 0.0, "max": 0.0}
    s = charts.summary([1, 2, 3, 4])
    assert (s["count"], s["mean"], s["median"], s["max"]) == (4, 2.5, 2.5, 4.0)


def test_count_axes_tick_whole_numbers():
    few = charts.histogram({"prompt": [1, 1, 2, 3]}, title="t", xaxis="x")["layout"]["yaxis"]
    assert few["tickformat"] == ",d" and few["dtick"] == 1 and few["range"] == [0, 2.5]
    many = charts.histogram({"prompt": [1] * 50 + [2]}, title="t", xaxis="x")["layout"]["yaxis"]
    assert many["tickformat"] == ",d" and "dtick" not in many
    assert charts.bar({"a": 3, "b": 1}, title="t")["layout"]["yaxis"]["dtick"] == 1
