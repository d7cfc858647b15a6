"""Job lifecycle: create (validate + pin), launch (claim once, write the run dir, spawn), cancel,
resume, rollback. Training never runs inside a request or a Celery task: `job_launch` starts a
detached supervisor (training.supervisor) and returns; `sync.py` follows the run through its files.
"""
from __future__ import annotations

import logging
import socket
import time
import uuid
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from training import hparams as cfg
from training.rundir import RunDir, claim_run_dir, write_atomic, write_json, write_jsonl
from webapp.core.audit import audit
from webapp.core.queue import LAUNCH_JOB, enqueue
from webapp.core.services import ApplicationError
from webapp.runs.models import Checkpoint, CheckpointStatus, Job, JobAttempt, JobState, RunEvent
from webapp.runs.services.data import Pinned, pinned_records
from webapp.runs.services.spec import JobPlan, job_spec, plan_job, reward_filename
from webapp.runs.services.sync import ensure_no_live_attempt, stop_lost_attempt

log = logging.getLogger(__name__)
# A resume that waits for the previous attempt to stop gives up after this long.
DEFER_LIMIT_S = 600


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


def _event(job: Job, kind: str, message: str, *, step: int | None = None, actor=None, **data: Any) -> RunEvent:
    return RunEvent.objects.create(job=job, kind=kind, step=step, message=message[:500], data=data,
                                   actor=actor if getattr(actor, "is_authenticated", False) else None)


def _total_steps(config: dict, n_train: int) -> int | None:
    hp = config["hp"]
    if hp.get("max_steps"):
        return int(hp["max_steps"])
    if n_train and hp.get("batch_size"):
        return max(1, n_train // min(hp["batch_size"], n_train)) * int(hp.get("epochs", 1))
    return None


def _next_attempt_number(job: Job) -> int:
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
    _event(job, "state", f"queued ({reason})", actor=user, state=JobState.QUEUED, warnings=plan.warnings)
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
    _event(parent, reason, f"{reason}: new job #{job.pk} from the checkpoint at step {checkpoint.step}",
           step=checkpoint.step, actor=user, child_job=job.pk, overrides=hp_overrides or {})
    audit(actor=user, action=f"job.{reason}", project=parent.project, obj=job,
          summary=f"Job #{job.pk} from #{parent.pk} step {checkpoint.step}",
          after={"parent": parent.pk, "checkpoint": checkpoint.pk, "overrides": hp_overrides or {}})
    return job


# -- launch (Celery task body) -----------------------------------------------------------------

def own_run_dir(job: Job) -> Path:
    """The job's run directory: claimed (new and empty, a random run id in its name) on the first
    launch and stored on the job; later attempts reuse it. A database id that repeats after a reset
    therefore never leads a job into another job's files."""
    if job.run_dir:
        return Path(job.run_dir)
    run = claim_run_dir(job.project.runs_root, str(job.pk))
    if not Job.objects.filter(pk=job.pk, run_dir="").update(run_dir=str(run.path)):
        run.path.rmdir()  # stored meanwhile by another launch: use that one
        job.refresh_from_db(fields=["run_dir"])
        return Path(job.run_dir)
    job.run_dir = str(run.path)
    return run.path


def write_run_files(job: Job, run_dir: Path, resume_from: str | None) -> dict[str, Any]:
    """Data, reward sources (first launch only) and job.json (every launch: hp and resume_from may change)."""
    run = RunDir(run_dir)
    if not run.data("train").exists():
        train, val = pinned_records(job)
        write_jsonl(run.data("train"), train)
        if val:
            write_jsonl(run.data("val"), val)
        for rv in job.reward_versions.select_related("function"):
            write_atomic(run.reward_dir / reward_filename(rv), rv.source)
    return job_spec(job, resume_from=resume_from or None, has_val=run.data("val").exists(), write_to=run_dir)


def _fail(job: Job, attempt: JobAttempt | None, message: str) -> None:
    now = timezone.now()
    if attempt is not None:
        JobAttempt.objects.filter(pk=attempt.pk).update(state=JobState.FAILED, ended_at=now)
    Job.objects.filter(pk=job.pk).update(state=JobState.FAILED, error=message[:5000], finished_at=now, updated_at=now)
    _event(job, "state", f"failed: {message}"[:500], state=JobState.FAILED)


def _previous_alive(job: Job) -> JobAttempt | None:
    """An earlier attempt that may still train: a fresh heartbeat, or a stale one whose processes could
    not be stopped from here (see sync.stop_lost_attempt). The new attempt waits for it."""
    from training.supervisor import attempt_state

    if not job.run_dir:
        return None
    earlier = job.attempts.filter(supervisor_pid__isnull=False,
                                  state__in=[JobState.STARTING, JobState.RUNNING, JobState.LOST])
    for prev in earlier.order_by("-number"):
        if prev.state == JobState.LOST:  # given up already: only its stop is in question
            state = "lost"
        else:
            state = attempt_state(RunDir(job.run_dir).attempt(prev.number).path, settings.RUN_HEARTBEAT_STALE_S)
        if state == "running" or (state == "lost" and not stop_lost_attempt(job, prev)):
            return prev
    return None


def job_launch(job_id: int) -> str:
    """Claim the queued job (queued -> starting, at most once), write its run dir, spawn the supervisor.

    Returns "launched", "skipped" (not queued: another worker has it, or it was cancelled) or
    "deferred" (a resume waits for the previous attempt to stop; re-enqueued in 2 s).
    """
    from training.backends import BackendError, get_backend
    from training.ray_cluster import check_shared_storage
    from training.supervisor import spawn_supervisor

    now = timezone.now()
    claimed = Job.objects.filter(pk=job_id, state=JobState.QUEUED, cancel_requested=False) \
        .update(state=JobState.STARTING, updated_at=now)
    if not claimed:
        return "skipped"
    job = Job.objects.select_related("project", "base_model", "teacher_model", "dataset_version__dataset") \
        .get(pk=job_id)
    attempt = job.attempts.filter(state=JobState.QUEUED).order_by("-number").first()
    if attempt is None:
        attempt = JobAttempt.objects.create(job=job, number=_next_attempt_number(job), reason="start",
                                            state=JobState.QUEUED)
    try:
        if _previous_alive(job) is not None:
            if time.time() - attempt.started_at.timestamp() > DEFER_LIMIT_S:
                _fail(job, attempt, "the previous attempt did not stop within 10 minutes; cancel it and resume again")
                return "skipped"
            Job.objects.filter(pk=job.pk, state=JobState.STARTING).update(state=JobState.QUEUED)
            enqueue_launch(job.pk, job.queue, countdown=2)
            return "deferred"
        run_dir = own_run_dir(job).resolve()
        spec = write_run_files(job, run_dir, attempt.resume_from)
        plan = get_backend(job.backend).prepare(spec, run_dir, attempt.number)
        if plan.ray_job:  # the driver runs on the cluster: it must see this run directory
            check_shared_storage(plan.ray_job["address"], run_dir)
        adir = RunDir(run_dir).attempt(attempt.number).create()
        write_json(adir.launch, plan.to_json())
        if Job.objects.filter(pk=job.pk, cancel_requested=True).exists():
            return _cancelled_before_start(job, attempt)
        pid = spawn_supervisor(adir.path)
    except BackendError as exc:
        hint = "" if exc.permanent else " (this may clear: resume the job to try again)"
        _fail(job, attempt, exc.message + hint)
        return "launched"
    except Exception as exc:  # noqa: BLE001 - any launch failure is the job's, with its message
        log.exception("launching job %s failed", job_id)
        _fail(job, attempt, f"launch failed: {exc}")
        return "launched"
    now = timezone.now()
    JobAttempt.objects.filter(pk=attempt.pk).update(supervisor_pid=pid, host=socket.gethostname()[:200],
                                                    state=JobState.RUNNING, started_at=now)
    step = _resume_step(attempt.resume_from)
    Job.objects.filter(pk=job.pk).update(
        state=JobState.RUNNING, run_dir=str(run_dir), attempt_count=attempt.number, started_at=job.started_at or now,
        finished_at=None, error="", heartbeat_at=now, last_step=step if step is not None else job.last_step,
        updated_at=now)
    _event(job, "state", f"running (attempt {attempt.number}, {attempt.reason})", step=step,
           state=JobState.RUNNING, attempt=attempt.number, pid=pid)
    if Job.objects.filter(pk=job.pk, cancel_requested=True).exists():  # cancelled while we spawned
        _request_stop(RunDir(run_dir).attempt(attempt.number).path)
    return "launched"


def _resume_step(path: str) -> int | None:
    name = Path(path).name if path else ""
    return int(name.rsplit("_", 1)[1]) if name.startswith("global_step_") and name.rsplit("_", 1)[1].isdigit() \
        else None


def _cancelled_before_start(job: Job, attempt: JobAttempt) -> str:
    now = timezone.now()
    JobAttempt.objects.filter(pk=attempt.pk).update(state=JobState.CANCELLED, ended_at=now)
    Job.objects.filter(pk=job.pk).update(state=JobState.CANCELLED, finished_at=now, updated_at=now)
    _event(job, "state", "cancelled before start", state=JobState.CANCELLED)
    return "skipped"


def _request_stop(attempt_dir: Path) -> None:
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
        _request_stop(RunDir(job.run_dir).attempt(attempt.number).path)
    now = timezone.now()
    if job.state == JobState.QUEUED:
        job.attempts.filter(state=JobState.QUEUED).update(state=JobState.CANCELLED, ended_at=now)
        if not running.exists():
            job.state, job.finished_at = JobState.CANCELLED, now
            job.save(update_fields=["state", "finished_at", "updated_at"])
    _event(job, "cancel", "cancel requested" if job.state != JobState.CANCELLED else "cancelled", actor=user,
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
        _event(job, "config", f"settings changed for {reason}", actor=user, before=before,
               after=cfg.flatten_overrides(hp_overrides))
    was_running = job.state == JobState.RUNNING
    if was_running:
        for attempt in job.attempts.filter(supervisor_pid__isnull=False,
                                           state__in=[JobState.STARTING, JobState.RUNNING]):
            _request_stop(RunDir(job.run_dir).attempt(attempt.number).path)
    attempt = JobAttempt.objects.create(job=job, number=_next_attempt_number(job), reason=reason,
                                        resume_from=target.path, state=JobState.QUEUED)
    job.state, job.cancel_requested, job.error, job.finished_at = JobState.QUEUED, False, "", None
    job.save(update_fields=["state", "cancel_requested", "error", "finished_at", "config", "updated_at"])
    _event(job, reason, f"{reason} from step {target.step} (attempt {attempt.number})", step=target.step, actor=user,
           checkpoint=target.pk, attempt=attempt.number, stopped_running=was_running)
    audit(actor=user, action=f"job.{reason}", project=job.project, obj=job,
          summary=f"Job #{job.pk}: {reason} from step {target.step}", after={"overrides": hp_overrides or {}})
    transaction.on_commit(lambda: enqueue_launch(job.pk, job_queue(job.backend, job.config["hp"])))
    return attempt
