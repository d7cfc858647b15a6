"""Pre-aggregated min/max pyramids of metric series, so a chart of 100k points reads ~2k rows.

Level L groups steps into buckets of 4**L steps and keeps, per bucket, the point holding the
minimum and the one holding the maximum (step, value, wall time). A chart of width W over a range
of R steps reads the level whose bucket count is at most W and bucket-downsamples those candidate
points (downsample.minmax_indices): every display bucket's extremes are real points and are among
the candidates, so spikes survive exactly as with the raw points.

Maintenance: `rollup_update` recomputes the buckets that new or changed points touch, level by
level (level 1 from the raw points, level k from level k-1), in a few queries. The first read of a
long range builds a series' rollups; after that each sync (`rollup_sync`) keeps them current, and a
read still rolls up anything logged since the last update before it answers.
"""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np
from django.db import connection, transaction

from webapp.monitoring.downsample import extremes_by_bucket, first_per_segment
from webapp.runs.models import MetricPoint

BASE = 4
LEVELS = tuple(range(1, 9))  # bucket sizes 4 .. 65,536 steps


def size(level: int) -> int:
    return BASE ** level


def _tables() -> tuple[str, str, str]:
    from webapp.monitoring.models import MetricRollup, MetricRollupState

    q = connection.ops.quote_name
    return q(MetricPoint._meta.db_table), q(MetricRollup._meta.db_table), q(MetricRollupState._meta.db_table)


def _extremes(rows: list[tuple], level: int) -> dict[tuple[str, int], list]:
    """{(name, bucket): [min_step, min_value, min_time, max_step, max_value, max_time]} of candidate points.

    `rows` are (name, step, value, time) candidates; ties keep the earliest step. Vectorised per
    name (the first roll-up of a long series sees every point).
    """
    by_name: dict[str, list[tuple]] = defaultdict(list)
    for name, step, value, t in rows:
        by_name[name].append((step, value, np.nan if t is None else t))
    out: dict[tuple[str, int], list] = {}
    sz = size(level)
    for name, items in by_name.items():
        arr = np.array(items, dtype=np.float64)
        arr = arr[np.lexsort((arr[:, 0],))]  # by step
        steps, values, times = arr[:, 0].astype(np.int64), arr[:, 1], arr[:, 2]
        buckets = steps // sz
        starts = np.flatnonzero(np.r_[True, buckets[1:] != buckets[:-1]])
        seg = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(steps)]))
        lo = first_per_segment(values == np.minimum.reduceat(values, starts)[seg], seg)
        hi = first_per_segment(values == np.maximum.reduceat(values, starts)[seg], seg)
        for b, i, j in zip(buckets[starts].tolist(), lo.tolist(), hi.tolist(), strict=True):
            out[(name, b)] = [int(steps[i]), float(values[i]), _time(times[i]),
                              int(steps[j]), float(values[j]), _time(times[j])]
    return out


def _time(t: float) -> float | None:
    return None if math.isnan(t) else float(t)


def _source_rows(job_id: int, level: int, spans: dict[str, tuple[int, int]]) -> list[tuple]:
    """(name, step, value, time) candidates for the given step spans: raw points for level 1,
    the min and max points of the level below otherwise. Names sharing a span share a query
    (after a normal sync every series logged the same steps)."""
    points, rollups, _ = _tables()
    by_span: dict[tuple[int, int], list[str]] = defaultdict(list)
    for name, span in spans.items():
        by_span[span].append(name)
    rows: list[tuple] = []
    with connection.cursor() as cur:
        for (lo, hi), names in by_span.items():
            marks = ", ".join(["%s"] * len(names))
            if level == 1:
                cur.execute(f"SELECT name, step, value, wall_time FROM {points} WHERE job_id = %s "
                            f"AND name IN ({marks}) AND step >= %s AND step <= %s AND value IS NOT NULL",
                            [job_id, *names, lo, hi])
                rows.extend(r for r in cur.fetchall() if math.isfinite(r[2]))
            else:
                child = size(level - 1)
                cur.execute(f"SELECT name, min_step, min_value, min_time, max_step, max_value, max_time FROM {rollups} "
                            f"WHERE job_id = %s AND name IN ({marks}) AND level = %s AND bucket >= %s AND bucket <= %s",
                            [job_id, *names, level - 1, lo // child, hi // child])
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
    through = dict(MetricRollupState.objects.filter(job_id=job_id, name__in=list(steps))
                   .values_list("name", "through_step"))
    MetricRollupState.objects.bulk_create(
        [MetricRollupState(job_id=job_id, name=n, through_step=max([max(s)] + ([through[n]] if through.get(n)
                                                                               is not None else [])))
         for n, s in steps.items()],
        update_conflicts=True, unique_fields=["job", "name"], update_fields=["through_step"])
    return written


def rollup_sync(job_id: int, points: Iterable[tuple[int, str]]) -> int:
    """After a sync: keep up to date the series that have rollups (a chart once needed them).

    Other series cost nothing per sync; the first long read builds theirs (see `_heal`). Series that only
    grew (every new step after the last rolled-up one: a live run's normal sync) take the append path, a few
    queries for all of them; a rewritten step (a later attempt's) recomputes its buckets (`rollup_update`).
    """
    points = list(points)
    from webapp.monitoring.models import MetricRollupState

    names = {n for _s, n in points}
    through = dict(MetricRollupState.objects.filter(job_id=job_id, name__in=list(names))
                   .values_list("name", "through_step"))
    if not through:
        return 0
    grown = {n for n, t in through.items() if t is not None}
    for s, n in points:
        if n in grown and s <= through[n]:
            grown.discard(n)
    written = _append(job_id, {n: through[n] for n in grown}) if grown else 0
    if written is None:  # too long a tail to merge: recompute
        written, grown = 0, set()
    rest = [(s, n) for s, n in points if n in through and n not in grown]
    return written + (rollup_update(job_id, rest) if rest else 0)


APPEND_TAIL = 64  # points a series may have gained since its last roll-up for the append path


def merge_bucket(old: list | None, tail: list[tuple[int, float, float | None]]) -> list:
    """A bucket's [min_step, min_value, min_time, max_step, max_value, max_time] after points later than all of
    its own (steps ascending): ties keep the earliest step, as a roll-up from scratch does."""
    out = list(old) if old is not None else [*tail[0], *tail[0]]
    for step, value, t in tail:
        if value < out[1]:
            out[0:3] = [step, value, t]
        if value > out[4]:
            out[3:6] = [step, value, t]
    return out


@transaction.atomic
def _append(job_id: int, through: dict[str, int]) -> int | None:
    """Merge the points logged after each series' last roll-up into the buckets at every level, reading
    only those points and the buckets they fall in. None when a series gained more than APPEND_TAIL."""
    from webapp.monitoring.models import MetricRollupState

    points, rollups, state = _tables()
    names = sorted(through)
    marks = ", ".join(["%s"] * len(names))
    with connection.cursor() as cur:
        cur.execute(f"SELECT name, step, value, wall_time FROM {points} WHERE job_id = %s AND name IN ({marks}) "
                    f"AND step > %s ORDER BY name, step", [job_id, *names, min(through.values())])
        tails: dict[str, list[tuple[int, float, float | None]]] = defaultdict(list)
        last: dict[str, int] = {}
        for name, step, value, t in cur.fetchall():
            if step <= through[name]:
                continue
            last[name] = step
            if value is not None and math.isfinite(value):
                tails[name].append((step, value, t))
        if any(len(v) > APPEND_TAIL for v in tails.values()):
            return None
        spans = {level: (min(v[0][0] for v in tails.values()) // size(level),
                         max(v[-1][0] for v in tails.values()) // size(level)) for level in LEVELS} if tails else {}
        existing: dict[tuple[str, int, int], list] = {}
        if spans:
            where = " OR ".join(["(level = %s AND bucket >= %s AND bucket <= %s)"] * len(spans))
            cur.execute(f"SELECT name, level, bucket, min_step, min_value, min_time, max_step, max_value, max_time "
                        f"FROM {rollups} WHERE job_id = %s AND name IN ({marks}) AND ({where})",
                        [job_id, *names, *(x for level, (a, b) in spans.items() for x in (level, a, b))])
            existing = {(r[0], r[1], r[2]): list(r[3:]) for r in cur.fetchall()}
        rows = []
        for name, tail in tails.items():
            for level in LEVELS:
                by_bucket: dict[int, list] = defaultdict(list)
                for p in tail:
                    by_bucket[p[0] // size(level)].append(p)
                for bucket, items in by_bucket.items():
                    old = existing.get((name, level, bucket))
                    new = merge_bucket(old, items)
                    if new != old:
                        rows.append((job_id, name, level, bucket, *new))
        if rows:
            if connection.vendor == "postgresql":
                # Ten arrays, not ten parameters a row (1,200 rows for 150 series): the driver need not split and
                # quote a statement of 12,000 placeholders, nor the server parse as many literals.
                source = ("SELECT * FROM unnest(%s::bigint[], %s::varchar[], %s::smallint[], %s::bigint[], "
                          "%s::integer[], %s::float8[], %s::float8[], %s::integer[], %s::float8[], %s::float8[])")
                params = [list(column) for column in zip(*rows, strict=True)]
            else:
                source = "VALUES " + ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"] * len(rows))
                params = [x for r in rows for x in r]
            cur.execute(f"INSERT INTO {rollups} (job_id, name, level, bucket, min_step, min_value, min_time, max_step, "
                        f"max_value, max_time) {source} ON CONFLICT (job_id, name, level, bucket) DO UPDATE SET "
                        "min_step = EXCLUDED.min_step, min_value = EXCLUDED.min_value, min_time = EXCLUDED.min_time, "
                        "max_step = EXCLUDED.max_step, max_value = EXCLUDED.max_value, max_time = EXCLUDED.max_time",
                        params)
    by_step: dict[int, list[str]] = defaultdict(list)
    for name, step in last.items():
        by_step[step].append(name)
    for step, group in by_step.items():
        MetricRollupState.objects.filter(job_id=job_id, name__in=group).update(through_step=step)
    return len(rows)


def rollup_build(job_id: int, name: str | None = None) -> int:
    """Roll up whole series from scratch (after a bulk import, or for the benchmark)."""
    qs = MetricPoint.objects.filter(job_id=job_id)
    if name is not None:
        qs = qs.filter(name=name)
    total = 0
    for n in sorted(set(qs.values_list("name", flat=True).distinct())):
        bounds = MetricPoint.objects.filter(job_id=job_id, name=n).values_list("step", flat=True)
        lo, hi = bounds.order_by("step").first(), bounds.order_by("-step").first()
        total += rollup_update(job_id, [(lo, n), (hi, n)])
    return total


def _bounds_many(job_id: int, names: list[str]) -> dict[str, tuple[int, int, int | None]]:
    """{name: (first step, last step, rolled-up-through step)} of several series in one round trip: two index
    lookups on (job, name, step) a series, never an aggregate over a series. Names without points are left out."""
    points, _, state = _tables()
    values = ", ".join(["(%s)"] * len(names))
    with connection.cursor() as cur:
        one = f"(SELECT step FROM {points} p WHERE p.job_id = %s AND p.name = w.name ORDER BY step"
        cur.execute(f"WITH wanted(name) AS (VALUES {values}) SELECT w.name, {one} LIMIT 1), {one} DESC LIMIT 1), "
                    f"(SELECT through_step FROM {state} s WHERE s.job_id = %s AND s.name = w.name) FROM wanted w",
                    [*names, job_id, job_id, job_id])
        rows = cur.fetchall()
    return {name: (int(lo), int(hi), through) for name, lo, hi, through in rows if lo is not None}


def _heal(job_id: int, name: str, lo: int, hi: int, through: int | None) -> None:
    """Roll up points logged after the last update (a first read, or a sync whose hook did not run)."""
    if through is None or through < hi:
        rollup_update(job_id, [(lo if through is None else through + 1, name), (hi, name)])


def plan(span: int, max_points: int, mode: str = "minmax") -> tuple[int, int] | None:
    """(level, display bucket width in steps) for a downsampled read of `span` steps, or None when
    reading the raw points is as cheap. The width is a whole number of level buckets, so each display
    bucket is a union of rollup buckets and their extremes are exactly its extremes."""
    target = max(1, max_points // (2 if mode == "minmax" else 1))
    ideal = span / target
    if ideal < BASE:
        return None
    level = min(LEVELS[-1], int(math.floor(math.log(ideal, BASE) + 1e-9)))
    return level, int(math.ceil(ideal / size(level))) * size(level)


def rollup_series(job_id: int, name: str, max_points: int, mode: str = "minmax",
                  step_range: tuple[float, float] | None = None) -> dict[str, Any] | None:
    """The downsampled series read from the rollups: per display bucket (aligned to multiples of
    `width` steps) its min and/or max point. None when the range is short enough to read raw."""
    return rollup_series_many(job_id, {name: mode}, max_points, step_range)[name]


def rollup_series_many(job_id: int, modes: dict[str, str], max_points: int,
                       step_range: tuple[float, float] | None = None) -> dict[str, dict[str, Any] | None]:
    """rollup_series of several series ({name: mode}) in two round trips for all of them (their bounds, then
    their buckets), not two a series: a run page asks for about ten at once."""
    out: dict[str, dict[str, Any] | None] = dict.fromkeys(modes)
    plans: dict[str, tuple[int, int, int, int]] = {}  # name: (lo, hi, level, width)
    for name, (first, last, through) in _bounds_many(job_id, list(modes)).items():
        lo, hi = first, last
        if step_range is not None:
            lo, hi = max(lo, math.floor(step_range[0])), min(hi, math.ceil(step_range[1]))
            if lo > hi:
                continue
        chosen = plan(hi - lo + 1, max_points, modes[name])
        if chosen is None:
            continue
        _heal(job_id, name, first, last, through)
        plans[name] = (lo, hi, *chosen)
    if not plans:
        return out
    points, rollups, _ = _tables()
    # Per series: whole buckets from the pyramid; the two edge buckets may stick out of the range, so their
    # in-range part comes raw. One UNION ALL over every series, each row tagged with its series.
    raw = (f"SELECT %s, step, value, wall_time, step, value, wall_time FROM {points} WHERE job_id = %s AND name = %s "
           f"AND step >= %s AND step <= %s AND value IS NOT NULL")
    parts, params = [], []
    for k, (name, (lo, hi, level, _width)) in enumerate(plans.items()):
        sz = size(level)
        b0, b1 = lo // sz, hi // sz
        parts += [f"SELECT %s, min_step, min_value, min_time, max_step, max_value, max_time FROM {rollups} "
                  f"WHERE job_id = %s AND name = %s AND level = %s AND bucket > %s AND bucket < %s", raw, raw]
        params += [k, job_id, name, level, b0, b1, k, job_id, name, lo, min(hi, (b0 + 1) * sz - 1),
                   k, job_id, name, max(lo, b1 * sz, (b0 + 1) * sz), hi]
    with connection.cursor() as cur:
        cur.execute(" UNION ALL ".join(parts), params)
        rows = cur.fetchall()
    if not rows:
        return out
    tagged = np.array(rows, dtype=np.float64)  # NULL wall times become nan
    for k, (name, (lo, hi, _level, width)) in enumerate(plans.items()):
        both = tagged[tagged[:, 0] == k]
        if len(both):
            out[name] = _downsampled(both[:, 1:], lo, hi, width, modes[name])
    return out


def _downsampled(both: np.ndarray, lo: int, hi: int, width: int, mode: str) -> dict[str, Any] | None:
    """A series' display points from its candidate rows (min step, value, time, max step, value, time)."""
    arr = np.concatenate([both[:, 0:3], both[:, 3:6]])
    arr = arr[np.isfinite(arr[:, 1])]
    if not len(arr):
        return None
    arr = arr[np.argsort(arr[:, 0], kind="stable")]
    arr = arr[np.r_[True, arr[1:, 0] != arr[:-1, 0]]]  # a point can be both a bucket's min and max
    steps = arr[:, 0].astype(np.int64)
    idx = extremes_by_bucket(arr[:, 1], steps // width, mode)  # type: ignore[arg-type]
    return {"step": steps[idx], "value": arr[idx, 1], "time": arr[idx, 2], "total": hi - lo + 1, "width": width}


def describe(job_id: int) -> dict[int, int]:
    """Rollup rows per level (diagnostics for the benchmark)."""
    from django.db.models import Count

    from webapp.monitoring.models import MetricRollup

    return dict(MetricRollup.objects.filter(job_id=job_id).values_list("level").annotate(n=Count("id"))
                .order_by("level"))
