"""Metric series API: downsampling with spikes kept, live increments, zoom, compare; bad input is a 400."""
from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from webapp.core.models import Project
from webapp.monitoring.models import CheckpointEvaluation
from webapp.runs.models import RunEvent

pytestmark = pytest.mark.django_db

KL = "actor/kl_loss"


def url(job, tail: str) -> str:
    return f"/api/projects/{job.project.slug}/monitor/jobs/{job.pk}/{tail}"


def test_long_series_is_downsampled_and_keeps_its_spike(make_job, points, viewer, api_for):
    job = make_job()
    values = [0.02] * 20_000
    values[12_345] = 3.0  # a one-step KL spike
    points(job, KL, values)
    r = api_for(viewer).get(url(job, "metrics/"), {"names": KL, "points": 1000})
    assert r.status_code == 200
    s = r.json()["series"][KL]
    assert s["downsampled"] and s["total"] == 20_000 and len(s["step"]) <= 1002
    assert max(s["value"]) == 3.0 and s["step"][s["value"].index(3.0)] == 12_346
    assert s["step"] == sorted(s["step"]) and len(s["time"]) == len(s["step"])
    assert r.json()["last_step"] == 20_000


def test_short_series_come_back_whole_with_band_edges(make_job, points, viewer, api_for):
    job = make_job()
    points(job, "critic/score/mean", [0.1, 0.2, 0.3])
    points(job, "critic/score/min", [0.0, 0.1, 0.1])
    points(job, "critic/score/max", [0.5, 0.6, 0.9])
    r = api_for(viewer).get(url(job, "metrics/"), {"names": "critic/score/mean", "lower": "critic/score/min",
                                                   "upper": "critic/score/max"})
    series = r.json()["series"]
    assert series["critic/score/mean"]["value"] == [0.1, 0.2, 0.3]
    assert series["critic/score/max"]["value"] == [0.5, 0.6, 0.9] and not series["critic/score/max"]["downsampled"]


def test_null_values_are_dropped_and_missing_names_are_empty(make_job, points, viewer, api_for):
    job = make_job()
    points(job, KL, [0.1, None, 0.3])
    r = api_for(viewer).get(url(job, "metrics/"), {"names": f"{KL},nope/never"})
    series = r.json()["series"]
    assert series[KL]["step"] == [1, 3] and series["nope/never"]["step"] == []


def test_since_step_returns_only_new_points(make_job, points, viewer, api_for):
    job = make_job()
    points(job, KL, [0.1] * 50)
    r = api_for(viewer).get(url(job, "metrics/"), {"names": KL, "since_step": 47})
    assert r.json()["series"][KL]["step"] == [48, 49, 50]


def test_zoom_range_is_full_resolution(make_job, points, viewer, api_for):
    job = make_job()
    points(job, KL, [0.01 * (i % 7) for i in range(30_000)])
    r = api_for(viewer).get(url(job, "metrics/"), {"names": KL, "x0": 1000, "x1": 1999, "points": 1500})
    s = r.json()["series"][KL]
    assert s["step"] == list(range(1000, 2000)) and not s["downsampled"]


def test_raw_returns_every_point(make_job, points, viewer, api_for):
    job = make_job()
    points(job, KL, [0.5] * 5000)
    r = api_for(viewer).get(url(job, "metrics/"), {"names": KL, "raw": "true", "points": 100})
    assert len(r.json()["series"][KL]["step"]) == 5000


@pytest.mark.parametrize("params, message", [
    ({}, "Name at least one metric"),
    ({"names": KL, "x0": 5}, "both ends"),
    ({"names": KL, "x0": 9, "x1": 5}, "must not be after"),
    ({"names": KL, "points": 0}, "greater than or equal"),
    ({"names": KL, "since_step": "soon"}, "valid integer"),
])
def test_bad_queries_are_400_with_a_message(make_job, viewer, api_for, params, message):
    job = make_job()
    r = api_for(viewer).get(url(job, "metrics/"), params)
    assert r.status_code == 400 and message in r.json()["detail"]


def test_live_poll_returns_new_points_events_and_state(make_job, points, viewer, api_for):
    job = make_job(last_step=12)
    points(job, KL, [0.1] * 12)
    old = RunEvent.objects.create(job=job, kind="checkpoint", step=5, message="saved step 5")
    new = RunEvent.objects.create(job=job, kind="guard_rule", step=12, message="KL above 0.1")
    r = api_for(viewer).get(url(job, "live/"), {"names": KL, "since_step": 10, "since_event": old.pk})
    body = r.json()
    assert body["series"][KL]["step"] == [11, 12]
    assert [e["id"] for e in body["events"]] == [new.pk] and body["events"][0]["kind"] == "guard_rule"
    assert body["state"] == "running" and body["is_active"] and body["job_last_step"] == 12


def test_live_poll_reads_every_series_in_one_query(make_job, points, viewer, api_for):
    job = make_job(last_step=12)
    names = [f"m/{i}" for i in range(6)]
    for i, name in enumerate(names):
        points(job, name, [float(i)] * (12 - i))  # m/i has i fewer steps
    client = api_for(viewer)

    def poll(some):
        with CaptureQueriesContext(connection) as ctx:
            body = client.get(url(job, "live/"), {"names": ",".join(some), "since_step": 5}).json()
        return body, len(ctx.captured_queries)

    one, n_one = poll(names[:1])
    body, n_six = poll(names)
    assert n_six == n_one  # a series more costs no query more
    assert one["series"]["m/0"]["step"] == list(range(6, 13))
    for i, name in enumerate(names):
        assert body["series"][name]["step"] == list(range(6, 13 - i))
        assert body["series"][name]["value"] == [float(i)] * (7 - i)
    assert body["last_step"] == 12


def test_live_poll_says_when_the_checkpoint_table_changed(make_job, checkpoint, viewer, engineer, api_for, project):
    job = make_job()
    seen = []

    def key() -> tuple[str, int]:
        body = api_for(viewer).get(url(job, "live/"), {"names": KL}).json()
        seen.append(body["checkpoints_key"])
        return body["checkpoints_key"], body["checkpoint_count"]

    assert key()[1] == 0
    assert key()[0] == seen[0]  # nothing changed: the same key, so the page keeps its table
    ckpt = checkpoint(job, 5)
    assert key() == (seen[-1], 1) and seen[-1] != seen[0]
    ev = CheckpointEvaluation.objects.create(checkpoint=ckpt)
    assert key()[0] != seen[-2]
    ev.status = "succeeded"
    ev.save()
    assert key()[0] != seen[-2]
    Project.objects.filter(pk=project.pk).update(active_checkpoint=ckpt)  # promoted elsewhere
    assert key()[0] != seen[-2]
    assert len(set(seen)) == len(seen) - 1  # every change, and only a change, gave a new key


def test_metric_names_and_default_charts_follow_the_job_kind(make_job, points, viewer, api_for):
    job = make_job()
    points(job, "val-core/arith/win_rate", [0.5])
    points(job, "actor/entropy", [1.0])
    body = api_for(viewer).get(url(job, "metric-names/")).json()
    assert body["names"] == ["actor/entropy", "val-core/arith/win_rate"]
    ids = [c["id"] for c in body["charts"]]
    assert ids[:3] == ["reward", "kl", "win_rate"] and "throughput" in ids
    kl = next(c for c in body["charts"] if c["id"] == "kl")
    assert kl["threshold"]["value"] == 0.1
    win = next(c for c in body["charts"] if c["id"] == "win_rate")
    assert win["series"][0]["band"] == ["val-core/arith/win_rate_lo", "val-core/arith/win_rate_hi"]
    assert win["series"][0]["count"] == "val-core/arith/win_rate_n"


def test_compare_overlays_one_metric_of_several_runs(make_job, points, viewer, api_for, project):
    a, b = make_job("a"), make_job("b")
    points(a, "critic/score/mean", [0.1, 0.2])
    points(b, "critic/score/mean", [0.3, 0.4, 0.5])
    api = api_for(viewer)
    r = api.get(f"/api/projects/{project.slug}/monitor/compare/", {"jobs": f"{a.pk},{b.pk}",
                                                                   "name": "critic/score/mean"})
    runs = r.json()["runs"]
    assert [x["job"] for x in runs] == [a.pk, b.pk] and runs[1]["value"] == [0.3, 0.4, 0.5]
    assert api.get(f"/api/projects/{project.slug}/monitor/compare/", {"jobs": "x", "name": "m"}).status_code == 400
    assert api.get(f"/api/projects/{project.slug}/monitor/compare/", {"jobs": f"{a.pk},99999",
                                                                      "name": "m"}).status_code == 404
