"""Job lifecycle, the web side, after creation (`plan.py` plans and saves a new job): rollback (a new job from a
checkpoint), resume, cancel. The worker's side, claiming an attempt and starting it, is `start.py`; `sync.py`
follows the run through its files.
"""
from __future__ import annotations

import logging
from pathlib import Path

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from training import hparams as cfg
from training.rundir import RunDir
from webapp.core.audit import audit
from webapp.core.services import ApplicationError
from webapp.runs.models import Checkpoint, CheckpointStatus, Job, JobAttempt, JobState
from webapp.runs.services import events
from webapp.runs.services.data import Pinned
from webapp.runs.services.events import record_event
from webapp.runs.services.plan import JobValidationError, insert_job, job_queue, plan_job
from webapp.runs.services.sync import ensure_no_live_attempt

log = logging.getLogger(__name__)


def next_attempt_number(job: Job) -> int:
    return (job.attempts.aggregate(n=Max("number"))["n"] or 0) + 1


@transaction.atomic
def job_create_child(*, parent: Job, checkpoint: Checkpoint, user, hp_overrides: dict | None = None,
                     reason: str = "rollback") -> Job:
    """Rollback: a NEW job from `checkpoint` with the parent's data, rewards and config (+ edits).

    It gets its own run directory; the parent and its later checkpoints stay as they are.
    """
    if checkpoint.job_id != parent.pk:
        raise ApplicationError("That checkpoint belongs to another job.", field="checkpoint")
    if checkpoint.status != CheckpointStatus.AVAILABLE:
        raise ApplicationError(f"Checkpoint at step {checkpoint.step} is {checkpoint.status}; choose another.",
                               field="checkpoint")
    pinned = Pinned(rows=[], manifest=parent.data_manifest)  # the parent's exact rows, not a new selection
    base_config = parent.config
    if parent.is_attached:  # not launched here: the data chosen at attach time, pinned now, and its own settings
        base_config = parent.config.get("rollback_config")
        if not base_config:
            raise ApplicationError("This attached run was attached without its model, data and reward, so it cannot "
                                   "be rolled back: attach it again choosing them.", field="checkpoint")
        pinned = None
    plan = plan_job(project=parent.project, kind=parent.kind, backend=parent.backend, preset=parent.preset,
                    hp_overrides=hp_overrides, dataset_version=parent.dataset_version, reward_spec=parent.reward_spec,
                    base_model=parent.base_model, teacher_model=parent.teacher_model, pinned=pinned,
                    include_unreviewed=bool(base_config.get("include_unreviewed")), base_config=base_config,
                    check_probes=False)
    if plan.errors:
        raise JobValidationError(plan.errors, plan.warnings)
    job = insert_job(plan=plan, user=user, name=f"{parent.name} ↳ {reason}@{checkpoint.step}", parent=parent,
                     resume_checkpoint=checkpoint, reason=reason,
                     manifest=plan.pinned.manifest if pinned is None else parent.data_manifest)
    record_event(parent.pk, reason, f"{reason}: new job #{job.pk} from the checkpoint at step {checkpoint.step}",
                 step=checkpoint.step, actor=user, child_job=job.pk, overrides=hp_overrides or {})
    audit(actor=user, action=f"job.{reason}", project=parent.project, obj=job,
          summary=f"Job #{job.pk} from #{parent.pk} step {checkpoint.step}",
          after={"parent": parent.pk, "checkpoint": checkpoint.pk, "overrides": hp_overrides or {}})
    return job


def request_stop(attempt_dir: Path) -> None:
    from training.supervisor import cancel

    attempt_dir.mkdir(parents=True, exist_ok=True)
    cancel(attempt_dir)


def current_attempt(job: Job) -> JobAttempt | None:
    """The latest attempt that was actually started (has a supervisor)."""
    return job.attempts.filter(supervisor_pid__isnull=False).order_by("-number").first()


@transaction.atomic
def job_cancel(*, job: Job, user) -> Job:
    """Ask the job to stop: queued -> cancelled now; running -> CANCEL file, cancelled when the supervisor exits."""
    job = Job.objects.select_for_update().get(pk=job.pk)
    if job.is_attached:
        raise ApplicationError(f"Run #{job.pk} is attached: the app does not own its process, so it cannot stop "
                               "it (stop following it instead).")
    if not job.is_active:
        raise ApplicationError(f"Job #{job.pk} is already {job.state}.")
    job.cancel_requested = True
    job.save(update_fields=["cancel_requested", "updated_at"])
    running = job.attempts.filter(supervisor_pid__isnull=False, state__in=[JobState.STARTING, JobState.RUNNING])
    for attempt in running:
        request_stop(RunDir(job.run_dir).attempt(attempt.number).path)
    now = timezone.now()
    if job.state == JobState.QUEUED:
        job.attempts.filter(state=JobState.QUEUED).update(state=JobState.CANCELLED, ended_at=now)
        if not running.exists():
            job.state, job.finished_at = JobState.CANCELLED, now
            job.save(update_fields=["state", "finished_at", "updated_at"])
    record_event(job.pk, "cancel", "cancel requested" if job.state != JobState.CANCELLED else "cancelled", actor=user,
                 step=job.last_step or None)
    audit(actor=user, action="job.cancel", project=job.project, obj=job, summary=f"Cancelled job #{job.pk}")
    return job


def latest_checkpoint(job: Job) -> Checkpoint | None:
    return job.checkpoints.filter(status=CheckpointStatus.AVAILABLE).order_by("-step").first()


def resume_target(job: Job) -> Checkpoint | None:
    """What a resume would start from: the job's last checkpoint, else the one it was branched from."""
    return latest_checkpoint(job) or job.resume_checkpoint


@transaction.atomic
def job_resume(*, job: Job, user, reason: str = "resume", checkpoint: Checkpoint | None = None,
               hp_overrides: dict | None = None) -> JobAttempt:
    """A new attempt in the SAME run dir from `checkpoint` (default: the last one), with optional edits.

    Used after `lost`/`failed` and by a guard rule's restore (which may call it on a running job:
    the current attempt is stopped first and the new one starts when it has exited).
    """
    job = Job.objects.select_for_update().select_related("project").get(pk=job.pk)
    if job.is_attached:
        raise ApplicationError(f"Run #{job.pk} is attached: it cannot be resumed here; roll it back from one of its "
                               "checkpoints to start an app-owned run.")
    if job.state in (JobState.QUEUED, JobState.STARTING):
        raise ApplicationError(f"Job #{job.pk} is {job.state}; wait until it runs or ends.")
    target = checkpoint or resume_target(job)
    if target is None:
        raise ApplicationError("There is no checkpoint to resume from; clone the job to start it again.",
                               field="checkpoint")
    if target.job_id not in (job.pk, job.resume_checkpoint and job.resume_checkpoint.job_id):
        raise ApplicationError("That checkpoint belongs to another job; use rollback to branch from it.",
                               field="checkpoint")
    if target.status != CheckpointStatus.AVAILABLE:
        raise ApplicationError(f"The checkpoint at step {target.step} is {target.status}.", field="checkpoint")
    if not Path(target.path).is_dir():  # checked before anything changes: the job keeps its state and step
        raise ApplicationError(f"The checkpoint folder for step {target.step} is missing on disk; resume from "
                               "another checkpoint.", field="checkpoint")
    ensure_no_live_attempt(job)  # never two trainers in one run directory
    if hp_overrides:
        plan = plan_job(project=job.project, kind=job.kind, backend=job.backend, preset=job.preset,
                        hp_overrides=hp_overrides, dataset_version=job.dataset_version, reward_spec=job.reward_spec,
                        base_model=job.base_model, teacher_model=job.teacher_model,
                        pinned=Pinned(rows=[], manifest=job.data_manifest), base_config=job.config,
                        check_probes=False)
        if plan.errors:
            raise JobValidationError(plan.errors, plan.warnings)
        before = {k: cfg.value_of(job.config, k) for k in cfg.flatten_overrides(hp_overrides) if k in cfg.BY_KEY}
        job.config = {**job.config, **{k: plan.config[k] for k in ("hp", "verl")}}
        record_event(job.pk, "config", f"settings changed for {reason}", actor=user, before=before,
                     after=cfg.flatten_overrides(hp_overrides))
    was_running = job.state == JobState.RUNNING
    if was_running:
        for attempt in job.attempts.filter(supervisor_pid__isnull=False,
                                           state__in=[JobState.STARTING, JobState.RUNNING]):
            request_stop(RunDir(job.run_dir).attempt(attempt.number).path)
    attempt = JobAttempt.objects.create(job=job, number=next_attempt_number(job), reason=reason,
                                        resume_from=target.path, state=JobState.QUEUED)
    job.state, job.cancel_requested, job.error, job.finished_at = JobState.QUEUED, False, "", None
    job.save(update_fields=["state", "cancel_requested", "error", "finished_at", "config", "updated_at"])
    record_event(job.pk, reason, f"{reason} from step {target.step} (attempt {attempt.number})", step=target.step,
                 actor=user, checkpoint=target.pk, attempt=attempt.number, stopped_running=was_running)
    audit(actor=user, action=f"job.{reason}", project=job.project, obj=job,
          summary=f"Job #{job.pk}: {reason} from step {target.step}", after={"overrides": hp_overrides or {}})
    transaction.on_commit(lambda: events.enqueue_launch(job.pk, job_queue(job.backend, job.config["hp"])))
    return attempt
