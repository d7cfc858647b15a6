"""Job lifecycle, the web side: create (validate + pin) and enqueue, cancel, resume, rollback. The worker's
side, claiming an attempt and starting it, is `start.py`; `sync.py` follows the run through its files.
"""
from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from training import hparams as cfg
from training.rundir import RunDir
from webapp.core.audit import audit
from webapp.core.queue import LAUNCH_JOB, enqueue
from webapp.core.services import ApplicationError
from webapp.runs.models import Checkpoint, CheckpointStatus, Job, JobAttempt, JobState, RunEvent
from webapp.runs.services.data import Pinned
from webapp.runs.services.plan import JobPlan, plan_job
from webapp.runs.services.sync import ensure_no_live_attempt

log = logging.getLogger(__name__)


class AlreadyLaunched(ApplicationError):
    """This reviewed launch (its launch token) already made a job: a second POST finds it, never a duplicate."""

    def __init__(self, job: Job):
        super().__init__(f"This configuration was already launched as job #{job.pk}.", "launch_token")
        self.job = job


class JobValidationError(ApplicationError):
    """Several field errors at once; `message`/`field` hold the first for single-error callers."""

    def __init__(self, errors: dict[str, str], warnings: dict[str, str] | None = None):
        field, message = next(iter(errors.items()))
        super().__init__(message, field)
        self.errors = errors
        self.warnings = warnings or {}


def job_queue(backend: str, hp: dict) -> str:
    """Celery queue: `gpu` for an explicit cuda device or VERL (unless on cpu), else `cpu`."""
    device = hp.get("device")
    return "gpu" if device == "cuda" or (backend == "verl" and device != "cpu") else "cpu"


def enqueue_launch(job_id: int, queue: str, countdown: float | None = None) -> None:
    enqueue(LAUNCH_JOB, job_id, queue=queue, countdown=countdown)


def record_event(job_id: int, kind: str, message: str, *, step: int | None = None, actor=None,
                 **data: Any) -> RunEvent:
    """One entry of a job's event log (the run page's timeline); it needs the job's id, nothing of its config."""
    return RunEvent.objects.create(job_id=job_id, kind=kind, step=step, message=message[:500], data=data,
                                   actor=actor if getattr(actor, "is_authenticated", False) else None)


def _total_steps(config: dict, n_train: int) -> int | None:
    hp = config["hp"]
    if hp.get("max_steps"):
        return int(hp["max_steps"])
    if n_train and hp.get("batch_size"):
        return max(1, n_train // min(hp["batch_size"], n_train)) * int(hp.get("epochs", 1))
    return None


def next_attempt_number(job: Job) -> int:
    return (job.attempts.aggregate(n=Max("number"))["n"] or 0) + 1


def _insert_job(*, plan: JobPlan, user, name: str | None, parent: Job | None, resume_checkpoint: Checkpoint | None,
                reason: str, manifest: dict, launch_token: uuid.UUID | None = None) -> Job:
    config = dict(plan.config)
    config["total_steps"] = _total_steps(plan.config, manifest.get("counts", {}).get("train", 0))
    config["include_unreviewed"] = plan.include_unreviewed
    job = Job.objects.create(
        project=plan.project, kind=plan.kind, backend=plan.backend, preset=plan.preset, config=config,
        name=(name or "").strip()[:200] or f"{plan.kind} · {plan.base_model.name} · {plan.preset}",
        base_model=plan.base_model, teacher_model=plan.teacher_model, dataset_version=plan.dataset_version,
        reward_spec=plan.reward_spec, data_manifest=manifest, parent=parent, resume_checkpoint=resume_checkpoint,
        queue=job_queue(plan.backend, plan.config["hp"]), created_by=user, launch_token=launch_token)
    job.reward_versions.set(plan.reward_versions)
    resume_from = resume_checkpoint.path if resume_checkpoint else ""
    JobAttempt.objects.create(job=job, number=1, reason=reason, resume_from=resume_from, state=JobState.QUEUED)
    record_event(job.pk, "state", f"queued ({reason})", actor=user, state=JobState.QUEUED, warnings=plan.warnings)
    transaction.on_commit(lambda: enqueue_launch(job.pk, job.queue))
    return job


def _with_lengths(plan: JobPlan) -> dict:
    """The pinned rows' manifest with the launch's length pre-flight, which the run page shows."""
    return {**plan.pinned.manifest, **({"lengths": plan.lengths} if plan.lengths else {})}


def launched_job(project, launch_token: uuid.UUID | None) -> Job | None:
    """The job a reviewed launch already made, if any."""
    return Job.objects.filter(project=project, launch_token=launch_token).first() if launch_token else None


def job_create(*, user, plan: JobPlan | None = None, name: str | None = None, parent: Job | None = None,
               resume_checkpoint: Checkpoint | None = None, reason: str = "start",
               launch_token: uuid.UUID | None = None, **inputs: Any) -> Job:
    """Save a planned job (pinned data manifest, reward versions) and enqueue its launch.

    `plan` comes from `plan_job`; callers with only the launch inputs (project, kind, backend, preset,
    hp_overrides, dataset_version, reward_spec, base_model, teacher_model, include_unreviewed) pass
    those instead and the job is planned here. Nothing is written to disk: the worker that launches
    the job writes its run directory. Raises JobValidationError (an ApplicationError) with every error.
    `launch_token` makes the launch happen once: the same token again raises AlreadyLaunched with the job
    (the unique column settles two requests at once).
    """
    done = launched_job(plan.project if plan else inputs.get("project"), launch_token)
    if done is not None:
        raise AlreadyLaunched(done)
    if plan is None:
        plan = plan_job(**inputs)
    errors = dict(plan.errors)
    if resume_checkpoint is not None and resume_checkpoint.job.project_id != plan.project.pk:
        errors.setdefault("resume_checkpoint", "That checkpoint is not in this project.")
    if errors:
        raise JobValidationError(errors, plan.warnings)
    # Planning (a tokenizer load, the data manifest) stays outside the transaction: on SQLite a
    # transaction holds the database's write lock from its start, and every other writer waits.
    try:
        with transaction.atomic():
            job = _insert_job(plan=plan, user=user, name=name, parent=parent, resume_checkpoint=resume_checkpoint,
                              reason=reason, manifest=_with_lengths(plan), launch_token=launch_token)
            audit(actor=user, action="job.create", project=plan.project, obj=job,
                  summary=f"Launched {job.kind} job {job.name} ({job.backend}, preset {job.preset})",
                  after={"config": job.config, "reward_spec": job.reward_spec,
                         "dataset_version": plan.dataset_version.pk, "warnings": plan.warnings})
    except IntegrityError:
        done = launched_job(plan.project, launch_token)
        if done is None:
            raise
        raise AlreadyLaunched(done) from None
    return job


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
    job = _insert_job(plan=plan, user=user, name=f"{parent.name} ↳ {reason}@{checkpoint.step}", parent=parent,
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
    transaction.on_commit(lambda: enqueue_launch(job.pk, job_queue(job.backend, job.config["hp"])))
    return attempt
