"""What a change of a job tells the rest: an entry in its event log (the run page's timeline) and its launch on
the queue. Written by creation (`plan.py`), the lifecycle (`launch.py`) and the worker's start (`start.py`)."""
from __future__ import annotations

from typing import Any

from webapp.core.queue import LAUNCH_JOB, enqueue
from webapp.runs.models import RunEvent


def enqueue_launch(job_id: int, queue: str, countdown: float | None = None) -> None:
    enqueue(LAUNCH_JOB, job_id, queue=queue, countdown=countdown)


def record_event(job_id: int, kind: str, message: str, *, step: int | None = None, actor=None,
                 **data: Any) -> RunEvent:
    """One entry of a job's event log (the run page's timeline); it needs the job's id, nothing of its config."""
    return RunEvent.objects.create(job_id=job_id, kind=kind, step=step, message=message[:500], data=data,
                                   actor=actor if getattr(actor, "is_authenticated", False) else None)
