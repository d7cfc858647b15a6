"""The run page's live poll: new points since a step, new events, the run's state, its checkpoint table's
fingerprint, health rules, stall mark and whether a worker is online."""
from __future__ import annotations

from typing import Any

from webapp.core.workers import worker_online
from webapp.monitoring import selectors
from webapp.monitoring.services.guard import rules_status
from webapp.monitoring.services.stall import stall_mark
from webapp.runs.models import Job


def live_poll(job: Job, query: selectors.SeriesQuery, since_event: int | None) -> dict[str, Any]:
    """One poll's answer for a job read by selectors.live_job (its row carries the run-wide parts)."""
    data = selectors.metric_series(job, query)
    table_key, n_checkpoints = selectors.checkpoint_state_key(job)
    newer_events = since_event is None or (job.last_event_id or 0) > since_event  # type: ignore[attr-defined]
    record = selectors.health_record(job)
    data.update(events=selectors.events(job, since_event) if newer_events else [], state=job.state,
                job_last_step=job.last_step, is_active=job.is_active, checkpoints_key=table_key,
                checkpoint_count=n_checkpoints, worker_online=worker_online(), rules=rules_status(job, record),
                stall=stall_mark(job, record.stalled_since if record else None, record.stall if record else None))
    return data
