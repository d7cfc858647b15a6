"""Downsampling that keeps spikes: per x-bucket, keep the points holding the minimum and the maximum.

A line drawn through those points passes through every extreme of the raw series, so a one-step
KL spike in 100k points still shows on a 1,500-pixel chart (a mean or a random sample would hide
it). Pure numpy, O(n); x must be sorted ascending (steps are).
"""
from __future__ import annotations

from typing import Literal

import numpy as np

Mode = Literal["minmax", "min", "max"]


def bucket_index(x: np.ndarray, n_buckets: int, x_range: tuple[float, float] | None = None) -> np.ndarray:
    """Equal-width bucket of each x over `x_range` (default: the data's own range), clipped to [0, n)."""
    x0, x1 = (float(x[0]), float(x[-1])) if x_range is None else (float(x_range[0]), float(x_range[1]))
    width = x1 - x0
    if width <= 0:
        return np.zeros(len(x), dtype=np.int64)
    b = np.floor((x - x0) * (n_buckets / width)).astype(np.int64)
    return np.clip(b, 0, n_buckets - 1)


def first_per_segment(mask: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """Index of the first True of `mask` within each segment id of `seg` (segments in order)."""
    cand = np.flatnonzero(mask)
    _, first = np.unique(seg[cand], return_index=True)
    return cand[first]


def minmax_indices(x: np.ndarray, y: np.ndarray, max_points: int, mode: Mode = "minmax",
                   x_range: tuple[float, float] | None = None) -> np.ndarray:
    """Indices (ascending) of the points to draw so that at most ~`max_points` remain.

    mode "minmax" keeps each bucket's min and max point (max_points // 2 buckets); "min" or "max"
    keeps one envelope (max_points buckets), for the lower and upper edges of a band. The first and
    last points are always kept. y must hold no NaN (drop them first).
    """
    n = len(x)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if max_points <= 0:
        raise ValueError("max_points must be > 0")
    per_bucket = 2 if mode == "minmax" else 1
    if n <= max_points:
        return np.arange(n)
    n_buckets = max(1, max_points // per_bucket)
    return extremes_by_bucket(y, bucket_index(np.asarray(x, dtype=np.float64), n_buckets, x_range), mode)


def extremes_by_bucket(y: np.ndarray, buckets: np.ndarray, mode: Mode = "minmax") -> np.ndarray:
    """Indices (ascending) of each bucket's min and/or max point plus the first and last points.

    `buckets` must be non-decreasing (points sorted by x); ties keep the earliest point.
    """
    n = len(y)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, buckets[1:] != buckets[:-1]])
    seg = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, n]))
    keep = [np.array([0, n - 1])]
    if mode in ("minmax", "min"):
        keep.append(first_per_segment(y == np.minimum.reduceat(y, starts)[seg], seg))
    if mode in ("minmax", "max"):
        keep.append(first_per_segment(y == np.maximum.reduceat(y, starts)[seg], seg))
    return np.unique(np.concatenate(keep))


def downsample(x: np.ndarray, y: np.ndarray, max_points: int, mode: Mode = "minmax",
               x_range: tuple[float, float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Convenience wrapper: the (x, y) arrays after `minmax_indices`."""
    idx = minmax_indices(x, y, max_points, mode, x_range)
    return x[idx], y[idx]

