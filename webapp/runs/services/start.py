"""Starting an attempt, the worker's side of a launch (the Celery task body): claim the queued job once,
write its run directory and job.json, spawn the detached supervisor (training.supervisor) and return.
Training never runs inside a request or a Celery task.
"""
from __future__ import annotations

import logging
import socket
import time
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from training.rundir import RunDir, claim_run_dir, write_atomic, write_json, write_jsonl
from webapp.runs.models import Job, JobAttempt, JobState
from webapp.runs.services import events, launch
from webapp.runs.services.data import pinned_records
from webapp.runs.services.events import record_event
from webapp.runs.services.spec import reward_filename, write_job_spec
from webapp.runs.services.sync import stop_lost_attempt

log = logging.getLogger(__name__)
# A resume that waits for the previous attempt to stop gives up after this long.
DEFER_LIMIT_S = 600


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


def write_run_files(job: Job, run_dir: Path, resume_from: str | None) -> None:
    """Data, reward sources (first launch only) and job.json (every launch: hp and resume_from may change)."""
    run = RunDir(run_dir)
    if not run.data("train").exists():
        train, val = pinned_records(job.dataset_version, job.data_manifest, job.pk)
        write_jsonl(run.data("train"), train)
        if val:
            write_jsonl(run.data("val"), val)
        for rv in job.reward_versions.select_related("function"):
            write_atomic(run.reward_dir / reward_filename(rv), rv.source)
    write_job_spec(job.pk, run_dir, resume_from=resume_from or None, has_val=run.data("val").exists())


def _fail(job: Job, attempt: JobAttempt | None, message: str) -> None:
    now = timezone.now()
    if attempt is not None:
        JobAttempt.objects.filter(pk=attempt.pk).update(state=JobState.FAILED, ended_at=now)
    Job.objects.filter(pk=job.pk).update(state=JobState.FAILED, error=message[:5000], finished_at=now, updated_at=now)
    record_event(job.pk, "state", f"failed: {message}"[:500], state=JobState.FAILED)


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
    # Without its settings: they reach the run only through job.json (spec.write_job_spec reads them; the backend
    # and the trainer read the file), so that what is written is what runs.
    job = Job.objects.select_related("project", "dataset_version__dataset").defer("config").get(pk=job_id)
    attempt = job.attempts.filter(state=JobState.QUEUED).order_by("-number").first()
    if attempt is None:
        attempt = JobAttempt.objects.create(job=job, number=launch.next_attempt_number(job), reason="start",
                                            state=JobState.QUEUED)
    try:
        if _previous_alive(job) is not None:
            if time.time() - attempt.started_at.timestamp() > DEFER_LIMIT_S:
                _fail(job, attempt, "the previous attempt did not stop within 10 minutes; cancel it and resume again")
                return "skipped"
            Job.objects.filter(pk=job.pk, state=JobState.STARTING).update(state=JobState.QUEUED)
            events.enqueue_launch(job.pk, job.queue, countdown=2)
            return "deferred"
        run_dir = own_run_dir(job).resolve()
        write_run_files(job, run_dir, attempt.resume_from)
        plan = get_backend(job.backend).prepare(run_dir, attempt.number)
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
    if not JobAttempt.objects.filter(pk=attempt.pk, supervisor_pid__isnull=True).update(
            supervisor_pid=pid, host=socket.gethostname()[:200], state=JobState.RUNNING, started_at=now):
        return "launched"  # so slow that the sync adopted the supervisor already (sync.adopt_orphaned_supervisor)
    step = _resume_step(attempt.resume_from)
    Job.objects.filter(pk=job.pk).update(
        state=JobState.RUNNING, run_dir=str(run_dir), attempt_count=attempt.number, started_at=job.started_at or now,
        finished_at=None, error="", heartbeat_at=now, last_step=step if step is not None else job.last_step,
        updated_at=now)
    record_event(job.pk, "state", f"running (attempt {attempt.number}, {attempt.reason})", step=step,
                        state=JobState.RUNNING, attempt=attempt.number, pid=pid)
    if Job.objects.filter(pk=job.pk, cancel_requested=True).exists():  # cancelled while we spawned
        launch.request_stop(RunDir(run_dir).attempt(attempt.number).path)
    return "launched"


def _resume_step(path: str) -> int | None:
    name = Path(path).name if path else ""
    return int(name.rsplit("_", 1)[1]) if name.startswith("global_step_") and name.rsplit("_", 1)[1].isdigit() \
        else None


def _cancelled_before_start(job: Job, attempt: JobAttempt) -> str:
    now = timezone.now()
    JobAttempt.objects.filter(pk=attempt.pk).update(state=JobState.CANCELLED, ended_at=now)
    Job.objects.filter(pk=job.pk).update(state=JobState.CANCELLED, finished_at=now, updated_at=now)
    record_event(job.pk, "state", "cancelled before start", state=JobState.CANCELLED)
    return "skipped"
