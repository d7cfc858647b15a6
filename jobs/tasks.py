"""Celery tasks: ids in, one service call, nothing else."""
from __future__ import annotations

from celery import shared_task


@shared_task(name="jobs.tasks.ping")
def ping(project_id: int) -> str:
    """Round trip through broker, worker and database (used by health checks and tests)."""
    from webapp.core.models import Project

    project = Project.objects.get(pk=project_id)
    from webapp.core.audit import audit

    audit(actor=None, action="worker.ping", project=project, obj=project, summary="worker ping")
    return project.slug


@shared_task(name="jobs.tasks.sync_runs")
def sync_runs() -> None:
    """Beat task: ingest metrics and checkpoints of active runs and detect lost ones."""
    try:
        from webapp.runs.services.sync import sync_active_jobs
    except ImportError:  # the runs services land in a later step; beat must not crash meanwhile
        return
    sync_active_jobs()
