"""Pre-aggregated min/max pyramids of metric series, so a chart of 100k points reads ~2k rows.

Level L groups steps into buckets of 4**L steps and keeps, per bucket, the point holding the
minimum and the one holding the maximum (step, value, wall time). A chart of width W over a range
of R steps reads the level whose bucket count is at most W and bucket-downsamples those candidate
points (downsample.minmax_indices): every display bucket's extremes are real points and are among
the candidates, so spikes survive exactly as with the raw points.

Maintenance: `rollup_update` recomputes the buckets that new or changed points touch, level by
level (level 1 from the raw points, level k from level k-1), in a few queries per sync. Reads
heal themselves: points logged after the last update are rolled up before the read.
"""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np
from django.db import connection, transaction

BASE = 4
LEVELS = tuple(range(1, 9))  # bucket sizes 4 .. 65,536 steps


def size(level: int) -> int:
    return BASE ** level


def _tables() -> tuple[str, str, str]:
    from webapp.monitoring.models import MetricRollup, MetricRollupState
    from webapp.runs.models import MetricPoint

    q = connection.ops.quote_name
    return q(MetricPoint._meta.db_table), q(MetricRollup._meta.db_table), q(MetricRollupState._meta.db_table)


def _extremes(rows: Iterable[tuple], level: int) -> dict[tuple[str, int], list]:
    """{(name, bucket): [min_step, min_value, min_time, max_step, max_value, max_time]} of candidate points.

    `rows` are (name, step, value, time) candidates; ties keep the earliest step.
    """
    out: dict[tuple[str, int], list] = {}
    sz = size(level)
    for name, step, value, t in rows:
        key = (name, step // sz)
        cur = out.get(key)
        if cur is None:
            out[key] = [step, value, t, step, value, t]
            continue
        if value < cur[1] or (value == cur[1] and step < cur[0]):
            cur[0], cur[1], cur[2] = step, value, t
        if value > cur[4] or (value == cur[4] and step < cur[3]):
            cur[3], cur[4], cur[5] = step, value, t
    return out


def _source_rows(job_id: int, level: int, spans: dict[str, tuple[int, int]]) -> list[tuple]:
    """(name, step, value, time) candidates for the given step spans: raw points for level 1,
    the min and max points of level-1 buckets below otherwise."""
    points, rollups, _ = _tables()
    rows: list[tuple] = []
    with connection.cursor() as cur:
        for name, (lo, hi) in spans.items():
            if level == 1:
                cur.execute(f"SELECT name, step, value, wall_time FROM {points} WHERE job_id = %s AND name = %s "
                            f"AND step >= %s AND step <= %s AND value IS NOT NULL", [job_id, name, lo, hi])
                rows.extend(r for r in cur.fetchall() if math.isfinite(r[2]))
            else:
                child = size(level - 1)
                cur.execute(f"SELECT name, min_step, min_value, min_time, max_step, max_value, max_time FROM {rollups} "
                            f"WHERE job_id = %s AND name = %s AND level = %s AND bucket >= %s AND bucket <= %s",
                            [job_id, name, level - 1, lo // child, hi // child])
                for n, s1, v1, t1, s2, v2, t2 in cur.fetchall():
                    rows.append((n, s1, v1, t1))
                    rows.append((n, s2, v2, t2))
    return rows


@transaction.atomic
def rollup_update(job_id: int, points: Iterable[tuple[int, str]]) -> int:
    """Recompute every bucket touched by these (step, name) points; returns the buckets written."""
    from webapp.monitoring.models import MetricRollup, MetricRollupState

    steps: dict[str, list[int]] = defaultdict(list)
    for step, name in points:
        steps[name].append(int(step))
    if not steps:
        return 0
    written = 0
    for level in LEVELS:
        sz = size(level)
        # whole buckets: the span from the first touched bucket's start to the last one's end
        spans = {n: (min(s) // sz * sz, (max(s) // sz + 1) * sz - 1) for n, s in steps.items()}
        extremes = _extremes(_source_rows(job_id, level, spans), level)
        if not extremes:
            break
        objs = [MetricRollup(job_id=job_id, name=n, level=level, bucket=b, min_step=e[0], min_value=e[1],
                             min_time=e[2], max_step=e[3], max_value=e[4], max_time=e[5])
                for (n, b), e in extremes.items()]
        MetricRollup.objects.bulk_create(
            objs, batch_size=2000, update_conflicts=True, unique_fields=["job", "name", "level", "bucket"],
            update_fields=["min_step", "min_value", "min_time", "max_step", "max_value", "max_time"])
        written += len(objs)
    for name, s in steps.items():
        state, _ = MetricRollupState.objects.get_or_create(job_id=job_id, name=name)
        if state.through_step is None or max(s) > state.through_step:
            MetricRollupState.objects.filter(pk=state.pk).update(through_step=max(s))
    return written


def rollup_build(job_id: int, name: str | None = None) -> int:
    """Roll up whole series from scratch (after a bulk import, or for the benchmark)."""
    from webapp.runs.models import MetricPoint

    qs = MetricPoint.objects.filter(job_id=job_id)
    if name is not None:
        qs = qs.filter(name=name)
    total = 0
    for n in sorted(set(qs.values_list("name", flat=True).distinct())):
        bounds = MetricPoint.objects.filter(job_id=job_id, name=n).values_list("step", flat=True)
        lo, hi = bounds.order_by("step").first(), bounds.order_by("-step").first()
        total += rollup_update(job_id, [(lo, n), (hi, n)])
    return total


def _bounds(job_id: int, name: str) -> tuple[int, int] | None:
    points, _, _ = _tables()
    with connection.cursor() as cur:
        # two index lookups on (job, name, step), not an aggregate over the series
        cur.execute(f"SELECT step FROM {points} WHERE job_id = %s AND name = %s ORDER BY step LIMIT 1", [job_id, name])
        lo = cur.fetchone()
        if lo is None:
            return None
        cur.execute(f"SELECT step FROM {points} WHERE job_id = %s AND name = %s ORDER BY step DESC LIMIT 1",
                    [job_id, name])
        return int(lo[0]), int(cur.fetchone()[0])


def _heal(job_id: int, name: str, hi: int) -> None:
    """Roll up points logged after the last update (when a sync's hook did not run)."""
    from webapp.monitoring.models import MetricRollupState

    through = MetricRollupState.objects.filter(job_id=job_id, name=name).values_list("through_step", flat=True).first()
    if through is not None and through >= hi:
        return
    bounds = _bounds(job_id, name)
    if bounds is None:
        return
    rollup_update(job_id, [(bounds[0] if through is None else through + 1, name), (hi, name)])


def _raw(job_id: int, name: str, lo: int, hi: int) -> list[tuple]:
    points, _, _ = _tables()
    with connection.cursor() as cur:
        cur.execute(f"SELECT step, value, wall_time FROM {points} WHERE job_id = %s AND name = %s AND step >= %s "
                    f"AND step <= %s AND value IS NOT NULL ORDER BY step", [job_id, name, lo, hi])
        return cur.fetchall()


def candidates(job_id: int, name: str, max_points: int,
               step_range: tuple[float, float] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, int] | None:
    """Candidate points (steps, values, times, estimated total) for a downsampled read, or None when
    the range is small enough to read raw."""
    bounds = _bounds(job_id, name)
    if bounds is None:
        return None
    lo, hi = bounds
    if step_range is not None:
        lo, hi = max(lo, math.floor(step_range[0])), min(hi, math.ceil(step_range[1]))
        if lo > hi:
            return None
    span = hi - lo + 1
    if span <= 2 * max_points:
        return None
    level = min(LEVELS[-1], max(1, math.ceil(math.log(span / max(1, max_points // 2), BASE))))
    _heal(job_id, name, bounds[1])
    sz = size(level)
    _, rollups, _ = _tables()
    b0, b1 = lo // sz, hi // sz
    rows: list[tuple] = []
    with connection.cursor() as cur:
        cur.execute(f"SELECT min_step, min_value, min_time, max_step, max_value, max_time FROM {rollups} "
                    f"WHERE job_id = %s AND name = %s AND level = %s AND bucket >= %s AND bucket <= %s",
                    [job_id, name, level, b0 + 1, b1 - 1])
        for s1, v1, t1, s2, v2, t2 in cur.fetchall():
            rows.append((s1, v1, t1))
            if s2 != s1:
                rows.append((s2, v2, t2))
    # the two edge buckets may stick out of the range: read their in-range part raw
    rows += _raw(job_id, name, lo, min(hi, (b0 + 1) * sz - 1))
    if b1 > b0:
        rows += _raw(job_id, name, max(lo, b1 * sz), hi)
    if not rows:
        return None
    arr = np.array(rows, dtype=np.float64)
    arr = arr[np.isfinite(arr[:, 1])]
    arr = arr[np.argsort(arr[:, 0], kind="stable")]
    return arr[:, 0], arr[:, 1], arr[:, 2], span


def describe(job_id: int) -> dict[int, int]:
    """Rollup rows per level (diagnostics for the benchmark)."""
    from django.db.models import Count

    from webapp.monitoring.models import MetricRollup

    return dict(MetricRollup.objects.filter(job_id=job_id).values_list("level").annotate(n=Count("id"))
                .order_by("level"))
