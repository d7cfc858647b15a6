"""Subscribed to the runs app's `job_synced` signal: metric rollups, the run guard (health rules, the KL guard),
stall detection, scheduled human evaluations, protected checkpoints, checkpoint and rollout-store retention after
each sync of a job.

`after_sync(job, new_points)` never raises: a monitoring failure must not stop ingest.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from webapp.monitoring.rollup import rollup_sync
from webapp.monitoring.services import guard_process, retention_apply, write_protected
from webapp.monitoring.services.periodic import schedule_process
from webapp.monitoring.services.rollouts import rollout_retention_apply
from webapp.monitoring.services.stall import notify_final_state, stall_check
from webapp.runs.models import FINAL_STATES, Job

logger = logging.getLogger(__name__)


def _triples(points: Iterable[Any]) -> list[tuple[int, str, Any]]:
    """(step, name, value) from MetricPoint objects or from tuples."""
    out = []
    for p in points or []:
        out.append((p.step, p.name, p.value) if hasattr(p, "name") else (p[0], p[1], p[2]))
    return out


def on_job_synced(sender: Any, *, job: Job, new_points: Iterable[Any], **_kw: Any) -> None:
    after_sync(job, new_points)


def after_sync(job: Job, new_points: Iterable[Any]) -> None:
    """new_points: the points this sync added or changed (MetricPoint objects or (step, name, value))."""
    raw = list(new_points or [])
    points = _triples(raw)
    # After a restore, one sync may still carry the dying attempt's last lines: the guard judges only
    # the newest attempt's points (the curves take them all).
    attempts = {getattr(p, "attempt", None) for p in raw}
    guard_points = points
    if None not in attempts and len(attempts) > 1:
        newest = max(attempts)
        guard_points = [t for t, p in zip(points, raw, strict=True) if p.attempt == newest]
    try:
        if points:
            rollup_sync(job.pk, [(s, n) for s, n, _v in points])
    except Exception:  # noqa: BLE001 - reads roll up what is missing themselves
        logger.exception("metric rollup failed for job %s", job.pk)
    try:
        if guard_points:
            guard_process(job=job, new_points=guard_points)
    except Exception:  # noqa: BLE001 - logged; the next sync tries again
        logger.exception("the run guard failed for job %s", job.pk)
    try:
        job.refresh_from_db()
        stall_check(job)
        notify_final_state(job)
    except Exception:  # noqa: BLE001 - logged; the next sync checks again
        logger.exception("stall check or notification failed for job %s", job.pk)
    try:
        schedule_process(job)  # periodic human evaluation: a task for every N-th checkpoint, once each
    except Exception:  # noqa: BLE001 - logged; the next sync tries again
        logger.exception("scheduled human evaluation failed for job %s", job.pk)
    try:
        job.refresh_from_db()
        write_protected(job)
        if job.state in FINAL_STATES:
            retention_apply(job=job)
    except Exception:  # noqa: BLE001
        logger.exception("checkpoint protection/retention failed for job %s", job.pk)
    try:
        rollout_retention_apply(job=job)  # during the run too: a long run's store must stay bounded
    except Exception:  # noqa: BLE001
        logger.exception("rollout-store retention failed for job %s", job.pk)
