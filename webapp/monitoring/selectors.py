"""Reads for the monitoring pages and API: metric series (fast path), checkpoints, lineage, events."""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from django.core.exceptions import ObjectDoesNotExist
from django.db import connection
from django.db.models import Count, Max, OuterRef, Prefetch, Subquery
from django.db.models.functions import Coalesce

from webapp.core.models import Project
from webapp.monitoring import rollup
from webapp.monitoring.downsample import minmax_indices
from webapp.runs.models import Checkpoint, CheckpointStatus, Job, MetricPoint, RunEvent
from webapp.runs.selectors import checkpoint_on_disk

DEFAULT_POINTS = 1500
MAX_POINTS = 20_000


def job_hp(job: Job) -> dict[str, Any]:
    """The job's hyperparameters: config["hp"] (the runs app's layout), or a flat config."""
    config = job.config or {}
    hp = config.get("hp")
    return dict(hp) if isinstance(hp, dict) else dict(config)


def metric_names(job: Job) -> list[str]:
    """Every metric name the job has logged, sorted.

    A loose index scan (one seek per name on the (job, name, step) index): a plain DISTINCT would
    read every point of the job.
    """
    table = _table()
    sql = (f"WITH RECURSIVE t(name) AS (SELECT MIN(name) FROM {table} WHERE job_id = %s UNION ALL "
           f"SELECT (SELECT MIN(name) FROM {table} WHERE job_id = %s AND name > t.name) FROM t "
           f"WHERE t.name IS NOT NULL) SELECT name FROM t WHERE name IS NOT NULL")
    with connection.cursor() as cur:
        cur.execute(sql, [job.pk, job.pk])
        return [r[0] for r in cur.fetchall()]


def _table() -> str:
    return connection.ops.quote_name(MetricPoint._meta.db_table)


def series_arrays(job_id: int, name: str, *, since_step: int | None = None,
                  step_range: tuple[float, float] | None = None,
                  time_range: tuple[float, float] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(steps, values, wall_times) of one series, ordered by step, NULL values dropped.

    A plain cursor over the (job, name, step) unique index: building 100k model tuples through
    the ORM costs more than the query itself.
    """
    sql = [f"SELECT step, value, wall_time FROM {_table()} WHERE job_id = %s AND name = %s AND value IS NOT NULL"]
    params: list[Any] = [job_id, name]
    if since_step is not None:
        sql.append("AND step > %s")
        params.append(int(since_step))
    if step_range is not None:
        sql.append("AND step >= %s AND step <= %s")
        params += [math.floor(step_range[0]), math.ceil(step_range[1])]
    if time_range is not None:
        sql.append("AND wall_time >= %s AND wall_time <= %s")
        params += [float(time_range[0]), float(time_range[1])]
    sql.append("ORDER BY step")
    with connection.cursor() as cur:
        cur.execute(" ".join(sql), params)
        rows = cur.fetchall()
    if not rows:
        empty = np.zeros(0)
        return empty, empty, empty
    arr = np.array(rows, dtype=np.float64)  # wall_time NULL becomes nan
    keep = np.isfinite(arr[:, 1])  # JSON has no inf/NaN; PostgreSQL can store them
    if not keep.all():
        arr = arr[keep]
    return arr[:, 0], arr[:, 1], arr[:, 2]


def series_arrays_many(job_id: int, names: list[str], *, since_step: int | None = None,
                       step_range: tuple[float, float] | None = None) -> dict[str, tuple[np.ndarray, ...]]:
    """series_arrays of several series (after `since_step`) in one query: a live poll's new points, or the
    short series of a chart."""
    marks = ", ".join(["%s"] * len(names))
    sql = [f"SELECT name, step, value, wall_time FROM {_table()} WHERE job_id = %s AND name IN ({marks}) "
           "AND value IS NOT NULL"]
    params: list[Any] = [job_id, *names]
    if since_step is not None:
        sql.append("AND step > %s")
        params.append(int(since_step))
    if step_range is not None:
        sql.append("AND step >= %s AND step <= %s")
        params += [math.floor(step_range[0]), math.ceil(step_range[1])]
    sql.append("ORDER BY name, step")
    grouped: dict[str, list[tuple]] = {}
    with connection.cursor() as cur:
        cur.execute(" ".join(sql), params)
        for name, *row in cur.fetchall():
            grouped.setdefault(name, []).append(row)
    out: dict[str, tuple[np.ndarray, ...]] = {}
    empty = np.zeros(0)
    for name in names:
        if not grouped.get(name):
            out[name] = (empty, empty, empty)
            continue
        arr = np.array(grouped[name], dtype=np.float64)  # wall_time NULL becomes nan
        arr = arr[np.isfinite(arr[:, 1])]  # JSON has no inf/NaN; PostgreSQL can store them
        out[name] = (arr[:, 0], arr[:, 1], arr[:, 2])
    return out


def _finite_or_none(values: np.ndarray) -> list[float | None]:
    return [None if math.isnan(v) else v for v in values.tolist()]


@dataclass
class SeriesQuery:
    names: list[str]
    lower: list[str] = field(default_factory=list)  # band lower edges (keep bucket minima)
    upper: list[str] = field(default_factory=list)  # band upper edges (keep bucket maxima)
    since_step: int | None = None
    step_range: tuple[float, float] | None = None
    time_range: tuple[float, float] | None = None
    max_points: int = DEFAULT_POINTS
    raw: bool = False  # no downsampling (the benchmark's baseline, and short live increments)


def _step_span_of_times(job_id: int, name: str, t0: float, t1: float) -> tuple[float, float] | None:
    with connection.cursor() as cur:
        cur.execute(f"SELECT MIN(step), MAX(step) FROM {_table()} WHERE job_id = %s AND name = %s "
                    f"AND wall_time >= %s AND wall_time <= %s", [job_id, name, t0, t1])
        lo, hi = cur.fetchone()
    return None if lo is None else (float(lo), float(hi))


_UNREAD = object()  # _one_series reads the rollups itself


def _one_series(job: Job, name: str, mode: str, query: SeriesQuery,
                arrays: tuple[np.ndarray, ...] | None = None, rolled: Any = _UNREAD) -> dict[str, Any]:
    step_range = query.step_range
    if query.time_range is not None:
        step_range = _step_span_of_times(job.pk, name, *query.time_range)
        if step_range is None:
            return {"step": [], "value": [], "time": [], "total": 0, "downsampled": False}
    if not query.raw and query.since_step is None:
        if rolled is _UNREAD:
            rolled = rollup.rollup_series(job.pk, name, query.max_points, mode, step_range)
        if rolled is not None:  # a long range: read the min/max pyramid, not every point
            return {"step": rolled["step"].tolist(), "value": rolled["value"].tolist(),
                    "time": _finite_or_none(rolled["time"]), "total": int(rolled["total"]), "downsampled": True,
                    "bucket_width": rolled["width"]}
    if arrays is None:
        arrays = series_arrays(job.pk, name, since_step=query.since_step, step_range=step_range)
    steps, values, times = arrays
    total = len(steps)
    down = not query.raw and total > query.max_points
    if down:
        idx = minmax_indices(steps, values, query.max_points, mode)  # type: ignore[arg-type]
        steps, values, times = steps[idx], values[idx], times[idx]
    return {"step": steps.astype(np.int64).tolist(), "value": values.tolist(), "time": _finite_or_none(times),
            "total": int(total), "downsampled": bool(down)}


def metric_series(job: Job, query: SeriesQuery) -> dict[str, Any]:
    """Series for the charts, each downsampled to at most ~max_points with spikes kept.

    Returns {"series": {name: {"step", "value", "time", "total", "downsampled"}}, "last_step"}.
    Band edges (`lower` / `upper`) keep only bucket minima / maxima.
    """
    modes: dict[str, str] = {}
    for name in query.names:
        modes.setdefault(name, "minmax")
    for name in query.lower:
        modes.setdefault(name, "min")
    for name in query.upper:
        modes.setdefault(name, "max")
    out: dict[str, Any] = {}
    last_step = query.since_step or 0
    batch: dict[str, tuple[np.ndarray, ...]] = {}
    rolled: dict[str, Any] = {}
    if query.time_range is None and modes:
        if not query.raw and query.since_step is None:
            # A chart load: every long series' bounds and rollup buckets in two queries, not two a series.
            rolled = rollup.rollup_series_many(job.pk, modes, query.max_points, query.step_range)
        rest = [name for name in modes if rolled.get(name) is None]
        if rest:  # a live poll's new points, or the short series: one query for all of them
            batch = series_arrays_many(job.pk, rest, since_step=query.since_step, step_range=query.step_range)
    for name, mode in modes.items():
        out[name] = _one_series(job, name, mode, query, batch.get(name), rolled.get(name, _UNREAD))
        if out[name]["step"]:
            last_step = max(last_step, out[name]["step"][-1])
    return {"series": out, "last_step": last_step}


def compare_series(jobs: Iterable[Job], name: str, max_points: int = DEFAULT_POINTS,
                   labels: dict[int, str] | None = None) -> list[dict[str, Any]]:
    """The same metric for several jobs (overlaid on one chart); `labels` name each run by what sets it
    apart (webapp.monitoring.compare.legend_labels)."""
    result = []
    for job in jobs:
        data = metric_series(job, SeriesQuery(names=[name], max_points=max_points))["series"][name]
        label = (labels or {}).get(job.pk) or f"#{job.pk} {job.name}"
        result.append({"job": job.pk, "label": label, "name": job.name, "state": job.state, **data})
    return result


def events(job: Job, since_id: int | None = None) -> list[dict[str, Any]]:
    """The run's events drawn on the curves and listed in its history (oldest first)."""
    qs = RunEvent.objects.filter(job=job).select_related("actor")
    if since_id is not None:
        qs = qs.filter(id__gt=since_id)
    return [{"id": e.id, "kind": e.kind, "step": e.step, "message": e.message, "data": e.data,
             "time": e.created_at.isoformat(), "ts": e.created_at.timestamp(),
             "actor": e.actor.username if e.actor else None} for e in qs.order_by("created_at", "id")]


def values_at_steps(job: Job, names: list[str], steps: Iterable[int]) -> dict[int, dict[str, float | None]]:
    """{step: {name: value}} for the given steps (the checkpoint table's metric columns)."""
    steps = list(steps)
    out: dict[int, dict[str, float | None]] = {s: {} for s in steps}
    if not steps or not names:
        return out
    for step, name, value in MetricPoint.objects.filter(job=job, name__in=names, step__in=steps).values_list(
            "step", "name", "value"):
        out[step][name] = value
    return out


def project_active_checkpoint_id(project: Project) -> int | None:
    return Project.objects.filter(pk=project.pk).values_list("active_checkpoint_id", flat=True).first()


def checkpoint_users(job: Job) -> dict[int, list[Job]]:
    """{checkpoint id: child jobs that resumed from it} for the job's checkpoints."""
    users: dict[int, list[Job]] = {}
    for child in Job.objects.filter(resume_checkpoint__job=job).order_by("created_at"):
        users.setdefault(child.resume_checkpoint_id, []).append(child)  # type: ignore[arg-type]
    return users


# The parts of the checkpoint table's fingerprint, in order (see checkpoint_table_state).
CHECKPOINT_STATE_PARTS = ("ck_n", "ck_t", "ev_n", "ev_t", "ex_n", "ex_t", "bt_n", "bt_t", "ck_children", "ck_active")


def checkpoint_state_fields() -> dict[str, Any]:
    """Annotations on a Job queryset for every part of its checkpoint table's fingerprint: the whole fingerprint
    comes with the job's own row in one query (it took seven)."""
    from webapp.monitoring.models import BlindTask, CheckpointEvaluation, CheckpointExport

    def counted(qs, prefix: str, by: str) -> dict[str, Any]:
        grouped = qs.filter(**{by: OuterRef("pk")}).order_by().values(by)
        return {f"{prefix}_n": Coalesce(Subquery(grouped.annotate(v=Count("id")).values("v")), 0),
                f"{prefix}_t": Subquery(grouped.annotate(v=Max("updated_at")).values("v"))}

    children = Job.objects.filter(resume_checkpoint__job=OuterRef("pk")).order_by().values("resume_checkpoint__job")
    return {**counted(Checkpoint.objects, "ck", "job"),
            **counted(CheckpointEvaluation.objects, "ev", "checkpoint__job"),
            **counted(CheckpointExport.objects, "ex", "checkpoint__job"),
            **counted(BlindTask.objects, "bt", "b_checkpoint__job"),
            "ck_children": Coalesce(Subquery(children.annotate(v=Count("id")).values("v")), 0),
            "ck_active": Subquery(Project.objects.filter(pk=OuterRef("project_id")).values("active_checkpoint_id"))}


def checkpoint_state_key(row: Any) -> tuple[str, int]:
    """(the fingerprint, how many checkpoints) from a row annotated with checkpoint_state_fields() (a dict or
    a Job)."""
    parts = [row[k] if isinstance(row, dict) else getattr(row, k) for k in CHECKPOINT_STATE_PARTS]
    return ":".join("" if p is None else p.isoformat() if hasattr(p, "isoformat") else str(p) for p in parts), \
        int(parts[0] or 0)


def checkpoint_table_state(job: Job) -> tuple[str, int]:
    """(a fingerprint of the checkpoint table, how many checkpoints): the fingerprint changes when a
    checkpoint is saved, deleted or promoted, an evaluation moves on, or a human evaluation or a child
    run starts from one. The job page polls it and re-reads the table only then."""
    row = Job.objects.filter(pk=job.pk).annotate(**checkpoint_state_fields()).values(*CHECKPOINT_STATE_PARTS).get()
    return checkpoint_state_key(row)


def live_job(project: Project, job_id: int) -> Job | None:
    """The job a live poll reads, with everything run-wide it answers besides new points in the same query: the
    checkpoint table's fingerprint, the newest event's id and its health record (rules' state, stall mark)."""
    return Job.objects.filter(project=project, pk=job_id).select_related("guard_rules_record").annotate(
        **checkpoint_state_fields(),
        last_event_id=Subquery(RunEvent.objects.filter(job=OuterRef("pk")).order_by("-id").values("id")[:1])).first()


def health_record(job: Job) -> Any:
    """The job's GuardRulesRecord as live_job read it, or None when it has none."""
    try:
        return job.guard_rules_record  # type: ignore[attr-defined]
    except ObjectDoesNotExist:
        return None


def checkpoint_rows(job: Job, metric_keys: list[str], offset: int = 0,
                    limit: int | None = None) -> list[dict[str, Any]]:
    """The checkpoint table, newest first (`limit` rows from `offset`): each checkpoint with its metrics at that
    step, usage and evaluations."""
    from webapp.monitoring.models import BlindSource, BlindTask, CheckpointEvaluation, CheckpointExport

    ordered = Checkpoint.objects.filter(job=job).order_by("-step")
    ordered = ordered[offset:offset + limit] if limit is not None else ordered[offset:]
    # Into plain lists (`to_attr`): reading a prefetched relation through its manager built a manager and a
    # queryset per checkpoint and relation, about a third of the API's time at 200 checkpoints.
    ckpts = list(ordered.prefetch_related(
        Prefetch("evaluations", queryset=CheckpointEvaluation.objects.order_by("-created_at", "-id"),
                 to_attr="evaluations_newest_first"),
        Prefetch("blind_tasks", queryset=BlindTask.objects.exclude(source=BlindSource.ARENA)
                 .order_by("-created_at", "-id"), to_attr="human_evals_newest_first"),
        Prefetch("exports", queryset=CheckpointExport.objects.order_by("-created_at", "-id"),
                 to_attr="exports_newest_first")))
    at = values_at_steps(job, metric_keys, [c.step for c in ckpts])
    active_id = project_active_checkpoint_id(job.project)
    users = checkpoint_users(job)
    rows = []
    for c in ckpts:
        metrics = {k: at[c.step].get(k, (c.metrics or {}).get(k)) for k in metric_keys}
        evals = c.evaluations_newest_first
        latest_exports: dict[str, Any] = {}
        for export in c.exports_newest_first:  # the latest of each variant
            latest_exports.setdefault(export.variant, export)
        rows.append({"checkpoint": c, "metrics": metrics, "is_active": c.pk == active_id,
                     "children": users.get(c.pk, []), "evaluation": evals[0] if evals else None,
                     "human_evals": c.human_evals_newest_first, "exports": list(latest_exports.values()),
                     **status_on_disk(c)})
    return rows


def status_on_disk(ckpt: Checkpoint) -> dict[str, Any]:
    """The checkpoint's status as the table and the API give it: an available one whose folder is gone (retention
    removed it since the run's last sync) is missing already, so nothing offers to roll back to it."""
    status = ckpt.status
    if status == CheckpointStatus.AVAILABLE and not checkpoint_on_disk(ckpt):
        status = CheckpointStatus.MISSING
    return {"status": status, "status_label": CheckpointStatus(status).label,
            "available": status == CheckpointStatus.AVAILABLE}


@dataclass
class LineageNode:
    job: Job
    branch_step: int | None
    children: list[LineageNode]
    current: bool = False


def lineage(job: Job) -> LineageNode:
    """The job's family tree: from its root ancestor down, each child with the step it branched from."""
    root = job
    seen = {root.pk}
    while root.parent_id and root.parent_id not in seen:
        root = Job.objects.select_related("resume_checkpoint").get(pk=root.parent_id)
        seen.add(root.pk)
    family = list(Job.objects.filter(project_id=job.project_id, parent__isnull=False)
                  .select_related("resume_checkpoint").order_by("created_at"))
    by_parent: dict[int, list[Job]] = {}
    for j in family:
        by_parent.setdefault(j.parent_id, []).append(j)  # type: ignore[arg-type]

    def build(node: Job, depth: int) -> LineageNode:
        kids = [] if depth > 50 else [build(c, depth + 1) for c in by_parent.get(node.pk, [])]
        step = node.resume_checkpoint.step if node.resume_checkpoint_id else None
        return LineageNode(node, step, kids, node.pk == job.pk)

    return build(root, 0)


def ancestry(job: Job) -> list[dict[str, Any]]:
    """The step ranges this run inherits, oldest first: a child resumed at step N of its parent has the
    parent's curve up to N (and the parent's own inheritance before that)."""
    chain: list[dict[str, Any]] = []
    node, seen = job, {job.pk}
    while node.parent_id and node.resume_checkpoint_id and node.parent_id not in seen:
        parent = Job.objects.get(pk=node.parent_id)
        chain.append({"job": parent.pk, "to": node.resume_checkpoint.step, "from": None})
        seen.add(parent.pk)
        node = parent
    chain.reverse()
    for prev, cur in zip(chain, chain[1:], strict=False):
        cur["from"] = prev["to"]  # a branch's own points start after the step it branched from
    return chain


def lineage_size(node: LineageNode) -> int:
    return 1 + sum(lineage_size(c) for c in node.children)


# -- on-demand evaluations, blind tasks and judges beside the training curve --------------------------------

def win_rate_marks(job: Job) -> dict[str, list[dict[str, Any]]]:
    """On-demand, human and automatic judges' win rates of the job's checkpoints, drawn next to the training-time
    curve. Human results come only from closed blind tasks: an open one's verdicts stay hidden."""
    from webapp.monitoring.blind_results import blind_results
    from webapp.monitoring.models import BlindSource, BlindTask, CheckpointEvaluation, EvaluationStatus

    evals = [{"step": e.checkpoint.step, "rate": e.win_rate, "lo": e.win_rate_lo, "hi": e.win_rate_hi, "n": e.n,
              "id": e.pk, "wins": (e.result or {}).get("wins"), "ties": (e.result or {}).get("ties"),
              "losses": (e.result or {}).get("losses")}
             for e in CheckpointEvaluation.objects.filter(checkpoint__job=job, status=EvaluationStatus.SUCCEEDED)
             .exclude(win_rate=None).select_related("checkpoint").order_by("checkpoint__step", "-created_at")]
    humans = []
    for task in BlindTask.objects.filter(b_checkpoint__job=job, is_open=False, status=EvaluationStatus.SUCCEEDED) \
            .exclude(source=BlindSource.ARENA).select_related("b_checkpoint"):
        s = blind_results(task).b
        if s.n:
            humans.append({"step": task.b_checkpoint.step, "rate": s.rate, "lo": s.lo, "hi": s.hi, "n": s.n,
                           "id": task.pk, "wins": s.wins, "ties": s.ties, "losses": s.losses,
                           "opponent": task.opponent, "flagged": bool((task.gap or {}).get("flagged"))})
    return {"evaluations": evals, "human": humans, "judges": judge_marks(job)}


def judge_marks(job: Job) -> list[dict[str, Any]]:
    """Automatic judges' win rates (W/T/L, bootstrap interval, position-bias share) per checkpoint."""
    from webapp.monitoring.models import BlindSource, EvaluationStatus, JudgeRun

    runs = JudgeRun.objects.filter(task__b_checkpoint__job=job, status=EvaluationStatus.SUCCEEDED) \
        .exclude(task__source=BlindSource.ARENA).exclude(win_rate=None).select_related("task__b_checkpoint") \
        .order_by("task__b_checkpoint__step", "id")
    return [{"step": r.task.b_checkpoint.step, "rate": r.win_rate, "lo": r.win_rate_lo, "hi": r.win_rate_hi,
             "n": r.n, "id": r.pk, "task": r.task_id, "label": r.label, "opponent": r.task.opponent,
             "wins": r.wins, "ties": r.ties, "losses": r.losses, "bias": r.position_bias_share} for r in runs]


def reward_gap_flags(job: Job) -> dict[str, Any]:
    """The run's periodic human evaluations with their gap checks, and the rule (stated on the run page)."""
    from webapp.monitoring.models import BlindSource, BlindTask
    from webapp.monitoring.services.gap import gap_rule, schedule_of

    tasks = list(BlindTask.objects.filter(b_checkpoint__job=job, source=BlindSource.PERIODIC)
                 .select_related("b_checkpoint").order_by("b_checkpoint__step"))
    return {"schedule": schedule_of(job), "rule": gap_rule(schedule_of(job)), "tasks": tasks,
            "flagged": [t for t in tasks if (t.gap or {}).get("flagged")]}
