"""Benchmark the metrics endpoint: 6 series x 100k points, downsampled for a 1,500-pixel chart, vs raw.

    .venv/bin/python bench/bench_metrics.py                 # SQLite (a throwaway database file)
    DATABASE_URL=postgres://... .venv/bin/python bench/bench_metrics.py   # a throwaway PostgreSQL database

It creates its own test database (never the app's), seeds one run with the points (one spike per
series), then times GET /api/projects/<slug>/monitor/jobs/<id>/metrics/ through the whole Django
stack (auth, access check, query, bucketing, JSON) with `points=1500`, and the same request with
`raw=1`, in the same process. Target: the downsampled request under 150 ms.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

NAMES = ["critic/score/mean", "critic/score/min", "critic/score/max", "actor/kl_loss", "actor/entropy",
         "response_length/mean"]


def seed(job, n_points: int) -> None:
    import numpy as np

    from webapp.runs.models import MetricPoint

    rng = np.random.default_rng(0)
    for k, name in enumerate(NAMES):
        values = np.cumsum(rng.normal(0, 0.01, n_points)) + k
        values[(k + 1) * n_points // 8] += 50.0  # a one-step spike the chart must still show
        times = 1.76e9 + np.arange(n_points) * 2.0
        batch = [MetricPoint(job=job, step=i + 1, name=name, value=float(v), wall_time=float(t))
                 for i, (v, t) in enumerate(zip(values, times, strict=True))]
        MetricPoint.objects.bulk_create(batch, batch_size=20_000)


def timed(client, url: str, repeat: int) -> tuple[list[float], int, dict]:
    out, size, body = [], 0, {}
    for _ in range(repeat):
        t = time.perf_counter()
        resp = client.get(url)
        content = resp.content
        out.append((time.perf_counter() - t) * 1000)
        if resp.status_code != 200:
            raise SystemExit(f"GET {url} -> {resp.status_code}: {content[:300]!r}")
        size = len(content)
    import json

    body = json.loads(content)
    return out, size, body


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=100_000, help="points per series (default 100000)")
    ap.add_argument("--width", type=int, default=1500, help="chart width in points (default 1500)")
    ap.add_argument("--repeat", type=int, default=15, help="timed downsampled requests (default 15)")
    ap.add_argument("--raw-repeat", type=int, default=3, help="timed raw requests (default 3)")
    args = ap.parse_args()

    import django

    django.setup()
    from django.conf import settings
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment

    from webapp.core.models import Membership, Project, Role
    from webapp.monitoring.rollup import describe, rollup_build
    from webapp.runs.models import Job

    engine = connection.settings_dict["ENGINE"]
    tmpdir = tempfile.mkdtemp(prefix="bench-metrics-")
    # Never the app's database, nor the one the test suite uses.
    connection.settings_dict.setdefault("TEST", {})
    connection.settings_dict["TEST"]["NAME"] = (str(Path(tmpdir) / "bench.sqlite3") if engine.endswith("sqlite3")
                                                else "workbench_bench_metrics")
    settings.RUNS_ROOT = Path(tmpdir) / "runs"
    setup_test_environment()
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        from django.contrib.auth import get_user_model

        user = get_user_model().objects.create_user("bench", password="bench-pw-123")
        project = Project.objects.create(slug="bench", name="Bench")
        Membership.objects.create(project=project, user=user, role=Role.VIEWER)
        job = Job.objects.create(project=project, name="bench", kind="grpo", state="running")
        t = time.perf_counter()
        seed(job, args.points)
        total = args.points * len(NAMES)
        print(f"database: {engine.rsplit('.', 1)[-1]}; seeded {len(NAMES)} series x {args.points:,} points "
              f"= {total:,} rows in {time.perf_counter() - t:.1f} s")
        t = time.perf_counter()
        rollup_build(job.pk)  # what the sync hook does as points arrive, here all at once
        print(f"min/max rollups built in {time.perf_counter() - t:.1f} s: rows per level {describe(job.pk)}")
        if not engine.endswith("sqlite3"):
            with connection.cursor() as cur:
                cur.execute("ANALYZE")
        client = Client()
        client.force_login(user)
        base = f"/api/projects/{project.slug}/monitor/jobs/{job.pk}/metrics/?names={','.join(NAMES)}"
        down_url = f"{base}&points={args.width}"
        timed(client, down_url, 2)  # warm up: imports, first query plans, caches
        down, down_size, body = timed(client, down_url, args.repeat)
        returned = sum(len(s["step"]) for s in body["series"].values())
        spikes = sum(1 for s in body["series"].values() if max(s["value"]) - min(s["value"]) > 40)
        raw, raw_size, raw_body = timed(client, base + "&raw=1", args.raw_repeat)
        raw_returned = sum(len(s["step"]) for s in raw_body["series"].values())
        dmed, rmed = statistics.median(down), statistics.median(raw)
        print(f"downsampled ({args.width} px): median {dmed:.1f} ms, min {min(down):.1f} ms, "
              f"p90 {sorted(down)[int(0.9 * (len(down) - 1))]:.1f} ms; {returned:,} points, "
              f"{down_size / 1024:.0f} KiB; spikes kept in {spikes}/{len(NAMES)} series")
        print(f"raw:                  median {rmed:.1f} ms, min {min(raw):.1f} ms; {raw_returned:,} points, "
              f"{raw_size / 1024 / 1024:.1f} MiB")
        print(f"ratio raw/downsampled: {rmed / dmed:.1f}x; target < 150 ms: {'PASS' if dmed < 150 else 'FAIL'}")
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
        shutil.rmtree(tmpdir, ignore_errors=True)


if __name__ == "__main__":
    main()
