"""Called by the runs app after each sync of a job: metric rollups, the KL guard, protected
checkpoints, retention.

`after_sync(job, new_points)` never raises: a monitoring failure must not stop ingest.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from webapp.runs.models import FINAL_STATES, Job

logger = logging.getLogger(__name__)


def _triples(points: Iterable[Any]) -> list[tuple[int, str, Any]]:
    """(step, name, value) from MetricPoint objects or from tuples."""
    out = []
    for p in points or []:
        out.append((p.step, p.name, p.value) if hasattr(p, "name") else (p[0], p[1], p[2]))
    return out


def after_sync(job: Job, new_points: Iterable[Any]) -> None:
    """new_points: the points this sync added or changed (MetricPoint objects or (step, name, value))."""
    from webapp.monitoring.rollup import rollup_sync
    from webapp.monitoring.services import kl_guard_process, retention_apply, write_protected

    points = _triples(new_points)
    try:
        if points:
            rollup_sync(job.pk, [(s, n) for s, n, _v in points])
    except Exception:  # noqa: BLE001 - reads roll up what is missing themselves
        logger.exception("metric rollup failed for job %s", job.pk)
    try:
        if points:
            kl_guard_process(job=job, new_points=points)
    except Exception:  # noqa: BLE001 - logged; the next sync tries again
        logger.exception("KL guard failed for job %s", job.pk)
    try:
        job.refresh_from_db()
        write_protected(job)
        if job.state in FINAL_STATES:
            retention_apply(job=job)
    except Exception:  # noqa: BLE001
        logger.exception("checkpoint protection/retention failed for job %s", job.pk)
