"""Plotly figures for the dataset stats page, as plain dicts (pure: numbers in, figure out).

Histograms are binned here, not in the browser, so a page for a million rows ships a few hundred
numbers instead of a million.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

COLORS = {"prompt": "#2457d6", "chosen": "#137333", "rejected": "#b42318", "response": "#9a6700"}
_LAYOUT = {"margin": {"l": 50, "r": 20, "t": 60, "b": 45}, "height": 320, "bargap": 0.05,
           "legend": {"orientation": "h", "x": 1, "xanchor": "right", "y": 1.0, "yanchor": "bottom"}}


def summary(values: Sequence[float]) -> dict[str, float]:
    """Count, mean, median, 95th percentile and max (zeros when empty)."""
    if len(values) == 0:
        return {"count": 0, "mean": 0.0, "median": 0.0, "p95": 0.0, "max": 0.0}
    arr = np.asarray(values, dtype=float)
    return {"count": int(arr.size), "mean": float(arr.mean()), "median": float(np.median(arr)),
            "p95": float(np.percentile(arr, 95)), "max": float(arr.max())}


def count_axis(max_count: int, title: str = "rows") -> dict[str, Any]:
    """A y axis for counts: whole-number ticks from 0 (one tick per count while the bars are short)."""
    axis: dict[str, Any] = {"title": {"text": title}, "rangemode": "tozero", "tickformat": ",d"}
    if max_count <= 10:
        axis.update(dtick=1, range=[0, max_count + 0.5])
    return axis


def _edges(all_values: np.ndarray, bins: int) -> np.ndarray:
    lo, hi = float(all_values.min()), float(all_values.max())
    if hi == lo:
        return np.array([lo - 0.5, hi + 0.5])
    if np.all(np.mod(all_values, 1) == 0) and hi - lo + 1 <= bins:
        return np.arange(lo - 0.5, hi + 1.5)  # integer data with few values: one bar per value
    return np.linspace(lo, hi, bins + 1)


def histogram(series: Mapping[str, Sequence[float]], *, title: str, xaxis: str, bins: int = 40) -> dict[str, Any]:
    """Overlaid histograms sharing bin edges, one bar trace per named series."""
    arrays = {name: np.asarray(vals, dtype=float) for name, vals in series.items() if len(vals)}
    fig: dict[str, Any] = {"data": [], "layout": {**_LAYOUT, "title": {"text": title}, "barmode": "overlay",
                                                  "xaxis": {"title": {"text": xaxis}},
                                                  "yaxis": {"title": {"text": "rows"}}}}
    if not arrays:
        return fig
    edges = _edges(np.concatenate(list(arrays.values())), bins)
    centers = ((edges[:-1] + edges[1:]) / 2).round(2).tolist()
    width = float(edges[1] - edges[0])
    most = 0
    for name, arr in arrays.items():
        counts, _ = np.histogram(arr, bins=edges)
        most = max(most, int(counts.max()))
        fig["data"].append({"type": "bar", "name": name, "x": centers, "y": counts.tolist(), "width": width,
                            "opacity": 0.6 if len(arrays) > 1 else 0.9,
                            "marker": {"color": COLORS.get(name, "#374151")}})
    fig["layout"]["yaxis"] = count_axis(most)
    return fig


def length_difference(chosen: Sequence[float], rejected: Sequence[float], *, unit: str = "characters",
                      bins: int = 40) -> tuple[dict[str, Any], dict[str, float]]:
    """Histogram of len(chosen) - len(rejected) per pair, with the share of pairs where chosen is longer.

    A preference set whose chosen answers are mostly longer teaches a reward model that length wins:
    a common reward-hacking signal.
    """
    diff = np.asarray(chosen, dtype=float) - np.asarray(rejected, dtype=float)
    stats = {"pairs": int(diff.size), "mean": float(diff.mean()) if diff.size else 0.0,
             "chosen_longer": float((diff > 0).mean()) if diff.size else 0.0,
             "rejected_longer": float((diff < 0).mean()) if diff.size else 0.0}
    title = (f"Chosen minus rejected length ({unit})<br><sup>chosen longer in {stats['chosen_longer']:.0%} "
             "of pairs</sup>")
    fig = histogram({"response": diff}, title=title, xaxis=f"len(chosen) - len(rejected), {unit}", bins=bins)
    fig["layout"]["shapes"] = [{"type": "line", "x0": 0, "x1": 0, "yref": "paper", "y0": 0, "y1": 1,
                                "line": {"color": "#111827", "dash": "dot"}}]
    return fig, stats


def bar(counts: Mapping[str, int], *, title: str, xaxis: str = "", limit: int = 30) -> dict[str, Any]:
    """Bars sorted by count, the tail beyond `limit` folded into 'other'."""
    items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    if len(items) > limit:
        items = items[: limit - 1] + [("other", sum(v for _, v in items[limit - 1:]))]
    return {"data": [{"type": "bar", "x": [k or "(none)" for k, _ in items], "y": [v for _, v in items],
                      "marker": {"color": "#2457d6"}}],
            "layout": {**_LAYOUT, "title": {"text": title}, "xaxis": {"title": {"text": xaxis}},
                       "yaxis": count_axis(max((v for _, v in items), default=0))}}
