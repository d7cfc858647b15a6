"""Stall detection for running jobs (training.stall), checked after every sync.

A stalled job gets a "stalled" run event, an audit entry and a notification; with action
"cancel_resume" its hung attempt is stopped and the job resumes from its last checkpoint. When steps
arrive again the mark is cleared with a "stall_cleared" event.
"""
from __future__ import annotations

import logging
import time
from typing import Any

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from training.stall import StallCheck, StallConfig, StallConfigError, check
from webapp.core.audit import audit
from webapp.core.services import ApplicationError
from webapp.monitoring.models import GuardRulesRecord
from webapp.monitoring.services import stacks
from webapp.notifications.services import notify
from webapp.runs.models import Job, JobAttempt, JobState, MetricPoint, RunEvent
from webapp.runs.services import launch

logger = logging.getLogger(__name__)
RECENT_STEPS = 20


def stall_config(job: Job) -> StallConfig:
    try:
        return StallConfig.from_dict((job.config or {}).get("stall"))
    except StallConfigError as exc:
        logger.warning("job %s: stall block ignored (defaults used): %s", job.pk, exc)
        return StallConfig()


def _running_attempt(job: Job) -> JobAttempt | None:
    return job.attempts.filter(state=JobState.RUNNING).order_by("-number").first()


def stall_check(job: Job, now: float | None = None) -> StallCheck | None:
    """Check a running job; mark, notify and act on a new stall, clear a stall that ended."""
    cfg = stall_config(job)
    attempt = _running_attempt(job) if job.state == JobState.RUNNING else None
    if attempt is None or not cfg.enabled:
        return None
    times = list(MetricPoint.objects.filter(job=job, attempt=attempt.number).values("step")
                 .annotate(t=Max("wall_time")).order_by("-step").values_list("t", flat=True)[:RECENT_STEPS])
    result = check(cfg, time.time() if now is None else now, attempt.started_at.timestamp(), times)
    summary = {"idle_s": round(result.idle_s, 1), "limit_s": round(result.limit_s, 1),
               "step_s": None if result.step_s is None else round(result.step_s, 2), "attempt": attempt.number}
    with transaction.atomic():
        record, _ = GuardRulesRecord.objects.select_for_update().get_or_create(job=job)
        was = record.stalled_since is not None
        record.stall = summary
        if result.stalled and not was:
            record.stalled_since = timezone.now()
        elif not result.stalled and was:
            record.stalled_since = None
        resume = (result.stalled and not was and cfg.action == "cancel_resume" and not job.is_attached
                  and record.stall_resumes < cfg.max_resumes)
        if resume:
            record.stall_resumes += 1
        record.save()
    if result.stalled and not was:
        _on_stall(job, cfg, result, summary, resume)
    elif was and not result.stalled:
        RunEvent.objects.create(job=job, kind="stall_cleared", step=job.last_step,
                                message="Steps arrive again: no longer stalled.", data=summary)
    return result


def _on_stall(job: Job, cfg: StallConfig, result: StallCheck, summary: dict[str, Any], resume: bool) -> None:
    usual = f" (usual step time {result.step_s:.1f} s)" if result.step_s is not None else " (no step yet)"
    then = "stopping it and resuming from the last checkpoint" if resume else "notifying"
    message = (f"Stalled: no new step for {result.idle_s / 60:.1f} min, limit {result.limit_s / 60:.1f} min"
               f"{usual}; {then}.")
    attempt = job.attempts.filter(number=summary["attempt"]).first()
    dump, said = ("", "") if attempt is None or job.is_attached else stacks.on_stall(job, attempt)  # before a resume
    RunEvent.objects.create(job=job, kind="stalled", step=job.last_step, message=message[:500],
                            data={**summary, "action": "cancel_resume" if resume else "notify"})
    audit(actor=None, action="job.stalled", project=job.project, obj=job, summary=message, after=summary)
    notify(job.project, "job.stalled", job=job, message=f"{message} {said}".strip(),
           data={**summary, "stacks": dump[:stacks.NOTIFY_CHARS]} if dump else summary)
    if resume:
        try:
            launch.job_resume(job=job, user=None, reason="stall")
        except ApplicationError as exc:
            RunEvent.objects.create(job=job, kind="stalled", step=job.last_step,
                                    message=f"Could not resume the stalled run: {exc.message}"[:500],
                                    data={"error": exc.message})


def stall_status(job: Job) -> dict[str, Any]:
    record = GuardRulesRecord.objects.filter(job=job).only("stalled_since", "stall").first()
    return stall_mark(job, record.stalled_since if record else None, record.stall if record else None)


def stall_mark(job: Job, stalled_since, stall: dict | None) -> dict[str, Any]:
    """What the run page shows of a stall, from the job's record (its stalled_since and last check)."""
    if stalled_since is None or job.state != JobState.RUNNING:
        return {"stalled": False}
    return {"stalled": True, "since": stalled_since.isoformat(), **(stall or {})}


FINAL_EVENTS = {JobState.SUCCEEDED: "job.finished", JobState.FAILED: "job.failed", JobState.LOST: "job.lost"}


def notify_final_state(job: Job) -> bool:
    """Tell the project's hooks once when a run finished, failed or was lost (not when cancelled)."""
    event = FINAL_EVENTS.get(job.state)
    if event is None:
        return False
    with transaction.atomic():
        record, _ = GuardRulesRecord.objects.select_for_update().get_or_create(job=job)
        if record.notified_state == job.state:
            return False
        record.notified_state = job.state
        record.save(update_fields=["notified_state", "updated_at"])
    detail = f": {job.error.strip().splitlines()[-1]}" if job.error and job.error.strip() else ""
    notify(job.project, event, job=job, message=f"Run #{job.pk} {job.name} {job.state} at step {job.last_step}"
                                                f"{detail}"[:500])
    return True
