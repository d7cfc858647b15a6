"""Downsampling keeps spikes, bounds the point count and never invents points."""
from __future__ import annotations

import numpy as np
import pytest

from webapp.monitoring.downsample import bucket_index, downsample, minmax_indices


def noisy(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = np.arange(1, n + 1, dtype=np.float64)
    return x, 0.05 + 0.01 * rng.standard_normal(n)


def test_small_series_are_returned_whole():
    x, y = noisy(100)
    assert np.array_equal(minmax_indices(x, y, 1500), np.arange(100))


def test_point_count_is_bounded():
    x, y = noisy(100_000)
    idx = minmax_indices(x, y, 1500)
    assert 1000 < len(idx) <= 1502  # two per bucket plus the two ends
    assert np.all(np.diff(idx) > 0)


@pytest.mark.parametrize("where", [0, 1, 37_123, 99_998, 99_999])
def test_a_single_step_spike_survives(where):
    x, y = noisy(100_000)
    y[where] = 7.5
    dx, dy = downsample(x, y, 1500)
    assert dy.max() == 7.5 and dx[dy.argmax()] == where + 1


def test_a_single_step_dip_survives():
    x, y = noisy(100_000, seed=3)
    y[50_000] = -4.0
    _, dy = downsample(x, y, 1500)
    assert dy.min() == -4.0


def test_every_bucket_keeps_its_extremes():
    x, y = noisy(20_000, seed=1)
    keep = minmax_indices(x, y, 200)  # 100 buckets of 200 points
    b = bucket_index(x, 100)
    for bucket in (0, 41, 99):
        sel = b == bucket
        kept = keep[b[keep] == bucket]
        assert y[sel].max() == y[kept].max() and y[sel].min() == y[kept].min()


def test_points_are_real_points_in_order():
    x, y = noisy(10_000)
    dx, dy = downsample(x, y, 300)
    lookup = dict(zip(x.tolist(), y.tolist(), strict=True))
    assert all(lookup[a] == b for a, b in zip(dx.tolist(), dy.tolist(), strict=True))
    assert np.all(np.diff(dx) > 0)


def test_envelope_modes_keep_one_side():
    x, y = noisy(10_000)
    y[123] = 9.0
    y[456] = -9.0
    _, upper = downsample(x, y, 500, mode="max")
    _, lower = downsample(x, y, 500, mode="min")
    assert upper.max() == 9.0 and -9.0 not in upper[1:-1]
    assert lower.min() == -9.0 and 9.0 not in lower[1:-1]


def test_x_range_buckets_only_the_visible_window():
    x, y = noisy(10_000)
    window = (x >= 4000) & (x <= 4999)
    idx = minmax_indices(x[window], y[window], 2000, x_range=(4000, 4999))
    assert len(idx) == 1000  # fits: full resolution inside the zoomed range


def test_bad_max_points_is_an_error_and_empty_is_empty():
    with pytest.raises(ValueError):
        minmax_indices(np.arange(5.0), np.arange(5.0), 0)
    assert len(minmax_indices(np.zeros(0), np.zeros(0), 10)) == 0


def test_constant_x_lands_in_one_bucket():
    x = np.ones(5000)
    y = np.arange(5000, dtype=float)
    idx = minmax_indices(x, y, 100)
    assert set(y[idx]) == {0.0, 4999.0}
