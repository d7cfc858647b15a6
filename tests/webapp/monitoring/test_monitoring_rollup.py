"""Min/max rollups give exactly the points that downsampling the raw series gives, incrementally too."""
from __future__ import annotations

import numpy as np
import pytest

from webapp.monitoring import rollup
from webapp.monitoring.downsample import extremes_by_bucket
from webapp.monitoring.hooks import after_sync
from webapp.monitoring.models import MetricRollup, MetricRollupState
from webapp.monitoring.selectors import SeriesQuery, metric_series
from webapp.runs.models import MetricPoint

pytestmark = pytest.mark.django_db
NAME = "actor/kl_loss"


def seed(job, values, start=1):
    MetricPoint.objects.bulk_create([MetricPoint(job=job, step=start + i, name=NAME, value=float(v),
                                                 wall_time=1e9 + start + i) for i, v in enumerate(values)],
                                    batch_size=5000)


def expected(job, served_series, mode="minmax", lo=None, hi=None):
    """Brute force over every raw point: each display bucket's extremes (same buckets as served)."""
    qs = MetricPoint.objects.filter(job=job, name=NAME).order_by("step")
    if lo is not None:
        qs = qs.filter(step__gte=lo, step__lte=hi)
    steps, values = map(np.array, zip(*qs.values_list("step", "value"), strict=True))
    idx = extremes_by_bucket(values, steps // served_series["bucket_width"], mode)
    return steps[idx].tolist()


def served(job, max_points, mode="minmax", step_range=None):
    q = SeriesQuery(names=[NAME] if mode == "minmax" else [], lower=[NAME] if mode == "min" else [],
                    upper=[NAME] if mode == "max" else [], max_points=max_points, step_range=step_range)
    return metric_series(job, q)["series"][NAME]


@pytest.mark.parametrize("mode", ["minmax", "min", "max"])
def test_rollup_reads_equal_raw_downsampling(make_job, mode):
    job = make_job()
    rng = np.random.default_rng(1)
    values = rng.normal(0, 1, 30_000)
    values[[17, 12_345, 29_990]] = [40.0, -35.0, 50.0]
    seed(job, values)
    s = served(job, 600, mode)
    assert s["downsampled"] and len(s["step"]) <= 604
    assert s["step"] == expected(job, s, mode)
    spikes = {"minmax": {40.0, -35.0, 50.0}, "min": {-35.0}, "max": {40.0, 50.0}}[mode]
    assert spikes <= set(s["value"])
    assert MetricRollup.objects.filter(job=job, level=1).count() == 7501  # built on first read (healing)


def test_zoomed_range_with_partial_edge_buckets(make_job):
    job = make_job()
    seed(job, np.random.default_rng(2).normal(0, 1, 40_000))
    s = served(job, 500, step_range=(10_003.4, 31_111.6))
    assert s["step"][0] >= 10_003 and s["step"][-1] <= 31_112
    assert s["step"] == expected(job, s, lo=10_003, hi=31_112) and len(s["step"]) <= 504


def test_incremental_updates_and_overwrites_match_a_fresh_build(make_job):
    job = make_job()
    rng = np.random.default_rng(3)
    first, second = rng.normal(0, 1, 9_000), rng.normal(0, 1, 6_000)
    seed(job, first)
    after_sync(job, [(s, NAME, None) for s in range(1, 9_001)])
    assert not MetricRollup.objects.filter(job=job).exists()  # nobody looked yet: no cost per sync
    served(job, 400)  # the first long read builds the rollups
    seed(job, second, start=9_001)
    after_sync(job, [(s, NAME, None) for s in range(9_001, 15_001)])
    assert MetricRollupState.objects.get(job=job, name=NAME).through_step == 15_000  # kept up by the hook
    # a restore re-logs steps 8000..8100 with new values (one of them a spike)
    MetricPoint.objects.filter(job=job, name=NAME, step__gte=8_000, step__lte=8_100).update(value=0.0)
    MetricPoint.objects.filter(job=job, name=NAME, step=8_050).update(value=99.0)
    after_sync(job, MetricPoint.objects.filter(job=job, name=NAME, step__gte=8_000, step__lte=8_100))
    s = served(job, 400)
    assert 99.0 in s["value"] and s["step"] == expected(job, s)
    before = sorted(MetricRollup.objects.filter(job=job).values_list("level", "bucket", "min_step", "max_step"))
    MetricRollup.objects.filter(job=job).delete()
    rollup.rollup_build(job.pk)
    assert sorted(MetricRollup.objects.filter(job=job).values_list("level", "bucket", "min_step", "max_step")) \
        == before


def test_points_logged_without_the_hook_are_rolled_up_on_read(make_job):
    job = make_job()
    seed(job, np.zeros(8_000))
    s = served(job, 300)
    assert s["step"] == expected(job, s)
    seed(job, np.r_[np.zeros(3_000), [77.0]], start=8_001)  # no after_sync: the read heals
    s = served(job, 300)
    assert s["value"][-1] == 77.0 and s["step"] == expected(job, s)


def test_short_ranges_read_raw_points(make_job):
    job = make_job()
    seed(job, np.arange(500.0))
    s = served(job, 1500)
    assert s["step"] == list(range(1, 501)) and not s["downsampled"]
    assert not MetricRollup.objects.filter(job=job).exists()


def test_a_live_run_growing_step_by_step_keeps_its_rollups_exact_in_a_few_queries(make_job,
                                                                                    django_assert_max_num_queries):
    job = make_job()
    names = [f"series/{k:03d}" for k in range(150)]
    rng = np.random.default_rng(4)
    MetricPoint.objects.bulk_create([MetricPoint(job=job, step=s, name=n, value=float(rng.normal()), wall_time=1e9 + s)
                                     for n in names for s in range(1, 301)], batch_size=5000)
    rollup.rollup_build(job.pk)
    for step in range(301, 321):  # a sync a step, as a live run logs them: ties, spikes and NaN among them
        values = rng.choice([0.0, 1.0, -1.0, 9.0, float(rng.normal()), None], size=len(names)).tolist()
        new = MetricPoint.objects.bulk_create([MetricPoint(job=job, step=step, name=n, value=v, wall_time=1e9 + step)
                                               for n, v in zip(names, values, strict=True)])
        with django_assert_max_num_queries(8):  # 150 series, eight levels: not a query per level or series
            after_sync_rollups(job, new)
    assert set(MetricRollupState.objects.filter(job=job).values_list("through_step", flat=True)) == {320}
    def table():
        return sorted(MetricRollup.objects.filter(job=job).values_list("name", "level", "bucket", "min_step",
                                                                       "min_value", "max_step", "max_value"))

    kept = table()
    MetricRollup.objects.filter(job=job).delete()
    rollup.rollup_build(job.pk)
    assert table() == kept  # exactly what a build from scratch gives


def after_sync_rollups(job, new):
    rollup.rollup_sync(job.pk, [(p.step, p.name) for p in new])


def test_a_chart_of_ten_long_series_reads_them_all_in_two_queries(make_job, django_assert_max_num_queries):
    job = make_job()
    names = [f"series/{k}" for k in range(10)]
    rng = np.random.default_rng(5)
    MetricPoint.objects.bulk_create([MetricPoint(job=job, step=s, name=n, value=float(rng.normal(k, 1)),
                                                 wall_time=1e9 + s)
                                     for k, n in enumerate(names) for s in range(1, 6001)], batch_size=5000)
    MetricPoint.objects.filter(job=job, name=names[3], step=4321).update(value=99.0)  # a spike in one of them
    rollup.rollup_build(job.pk)
    query = SeriesQuery(names=names[:8], lower=names[8:9], upper=names[9:], max_points=300,
                        step_range=(101.5, 5_900.2))
    with django_assert_max_num_queries(2):  # the bounds of all ten, then the buckets of all ten
        many = metric_series(job, query)["series"]
    assert 99.0 in many[names[3]]["value"]
    for name in names:  # each as read alone, and as brute force over its raw points gives
        mode = "min" if name == names[8] else "max" if name == names[9] else "minmax"
        alone = rollup.rollup_series(job.pk, name, 300, mode, (101.5, 5_900.2))
        assert many[name]["downsampled"] and many[name]["step"] == alone["step"].tolist()
        raw = MetricPoint.objects.filter(job=job, name=name, step__gte=101, step__lte=5_901).order_by("step")
        steps, values = map(np.array, zip(*raw.values_list("step", "value"), strict=True))
        assert many[name]["step"] == steps[extremes_by_bucket(values, steps // alone["width"], mode)].tolist()


def test_a_chart_of_short_series_reads_their_points_in_one_query(make_job, django_assert_max_num_queries):
    job = make_job()
    names = ["a", "b", "c"]
    MetricPoint.objects.bulk_create([MetricPoint(job=job, step=s, name=n, value=float(s * (k + 1)), wall_time=1e9 + s)
                                     for k, n in enumerate(names) for s in range(1, 201)])
    with django_assert_max_num_queries(2):  # their bounds, then all their points
        series = metric_series(job, SeriesQuery(names=names, max_points=1500))["series"]
    for k, name in enumerate(names):
        assert series[name]["step"] == list(range(1, 201)) and not series[name]["downsampled"]
        assert series[name]["value"] == [float(s * (k + 1)) for s in range(1, 201)]
