"""Follow running jobs through their run directories: metrics, checkpoints, heartbeat, exit.

Called every 2 s by the beat task (`jobs.tasks.sync_runs` -> `sync_active_jobs`). Idempotent:
each attempt keeps the byte offset where ingestion stopped, MetricPoint is unique per
(job, name, step) and upserted, and a point from a later attempt is never overwritten by an
earlier one. At the end of each job's sync the `job_synced` signal (webapp.runs.signals) goes out;
webapp.monitoring subscribes to it (the KL guard lives there).
"""
from __future__ import annotations

import contextlib
import logging
import socket
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from training.rundir import AttemptDir, RunDir, read_json
from training.trainer_log import strip_ansi
from webapp.core.services import ApplicationError
from webapp.runs.models import (
    ACTIVE_STATES,
    Checkpoint,
    CheckpointStatus,
    Job,
    JobAttempt,
    JobState,
    MetricPoint,
    RunEvent,
)
from webapp.runs.signals import job_synced

log = logging.getLogger(__name__)
LIVE = (JobState.STARTING, JobState.RUNNING)
ERROR_TAIL_LINES = 40


def attempt_dir(job: Job, number: int) -> AttemptDir:
    return RunDir(job.run_dir).attempt(number)


def tail_lines(path: Path, n: int = 200, max_bytes: int = 256 * 1024) -> list[str]:
    """The last `n` lines of a (possibly huge) log file, as text (terminal colour codes taken out)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read()
    except FileNotFoundError:
        return []
    lines = strip_ansi(data.decode("utf-8", errors="replace")).splitlines()
    if size > max_bytes and lines:
        lines = lines[1:]  # first line is probably cut
    return lines[-n:]


# -- metrics -----------------------------------------------------------------------------------

def _tail_for(path: Path, state: dict):
    from training.ingest import MetricsTail

    tail = MetricsTail(path)
    tail.offset = int(state.get("offset", 0))
    if state.get("head") is not None:
        tail._head = bytes.fromhex(state["head"])
    if state.get("ino") is not None:
        tail._ino = int(state["ino"])
    return tail


def _tail_state(tail) -> dict:
    return {"offset": tail.offset, "head": getattr(tail, "_head", b"").hex(), "ino": getattr(tail, "_ino", None)}


def _late_rollout_steps(state: dict, record_steps: list[int], dumps: set[int]) -> list[int]:
    """Rollout dumps of steps already ingested that were not there when their metrics line was read."""
    seen, read = int(state.get("max_step", 0)), int(state.get("rollouts_read", 0))
    return sorted(s for s in dumps if read < s <= seen and s not in record_steps)


def ingest_attempt_metrics(job: Job, attempt: JobAttempt) -> list[MetricPoint]:
    """Upsert the lines added to this attempt's metrics.jsonl since the last call; return the new points.

    Each step read also gets the metrics its sample dumps give (VERL's tied-group share; validation wins /
    ties / losses and accuracy; the per-component reward series)."""
    from training import rollouts
    from training.ingest import derived_metrics

    previous = attempt.ingest or {}
    tail = _tail_for(attempt_dir(job, attempt.number).metrics, previous)
    records = tail.read_new()
    record_steps = sorted({s for s, _ in records})
    dumps = set(rollouts.steps(job.run_dir)) if job.run_dir else set()
    late = _late_rollout_steps(previous, record_steps, dumps)
    state = {**_tail_state(tail), "max_step": max([int(previous.get("max_step", 0)), *record_steps]),
             "rollouts_read": max([int(previous.get("rollouts_read", 0)), *late,
                                   *(s for s in record_steps if s in dumps)])}
    if state != attempt.ingest:
        attempt.ingest = state
        JobAttempt.objects.filter(pk=attempt.pk).update(ingest=state)
    if not records and not late:
        return []
    values: dict[tuple[str, int], float | None] = {}
    # With its step's metrics line, not on its own: the health rules judge each step once, on everything logged.
    # A dump written after its step's line (VERL writes them from a background thread) is read on a later sync.
    derived = [(step, derived_metrics(job.run_dir, step)) for step in sorted({*record_steps, *late})]
    for step, data in derived + records:  # a value the trainer logged wins
        for name, value in data.items():
            values[(name[:128], step)] = value  # a later line for the same step wins
    if not values:
        return []
    steps = [s for _, s in values]
    newer = set(MetricPoint.objects.filter(job=job, attempt__gt=attempt.number, step__gte=min(steps),
                                           step__lte=max(steps)).values_list("name", "step"))
    now = time.time()
    points = [MetricPoint(job=job, name=name, step=step, value=value, wall_time=now, attempt=attempt.number)
              for (name, step), value in values.items() if (name, step) not in newer]
    if points:
        MetricPoint.objects.bulk_create(points, batch_size=500, update_conflicts=True,
                                        unique_fields=["job", "name", "step"],
                                        update_fields=["value", "wall_time", "attempt"])
    return points


# -- checkpoints -------------------------------------------------------------------------------

def sync_checkpoints(job: Job) -> list[Checkpoint]:
    """Create/refresh Checkpoint rows from checkpoints/global_step_N; flag the ones gone from disk."""
    from training.checkpoints import dir_size
    from training.ingest import discover_new_checkpoints

    run_dir = Path(job.run_dir)
    # This runs every few seconds per active run over hundreds of checkpoints: one recorded already (available,
    # with its metrics) whose folder is still at its path is neither described nor loaded again; sizes are
    # measured only for new ones (a finished save does not change).
    settled = dict(job.checkpoints.filter(status=CheckpointStatus.AVAILABLE).exclude(metrics={})
                   .values_list("step", "path"))
    infos, present = discover_new_checkpoints(run_dir, settled)
    infos = [i for i in infos if i.complete]
    existing = {c.step: c for c in job.checkpoints.exclude(step__in=present)} if present else \
        {c.step: c for c in job.checkpoints.all()}
    # A trainer left running after its attempt was given up is not the job's: its new folders stay off the list.
    given_up = set(job.attempts.filter(state=JobState.LOST).values_list("number", flat=True))
    infos = [i for i in infos if i.step in existing or (i.manifest or {}).get("attempt") not in given_up]
    created = []
    for info in infos:
        path = str(Path(info.path).resolve())
        ckpt = existing.get(info.step)
        if ckpt is not None and ckpt.status == CheckpointStatus.AVAILABLE and ckpt.path == path and ckpt.metrics:
            continue  # recorded already, with its metrics
        metrics = (info.manifest or {}).get("metrics") or {}
        if not metrics:  # VERL writes no manifest: take the step's logged metrics
            metrics = dict(job.metric_points.filter(step=info.step).values_list("name", "value"))
        if ckpt is None:
            ckpt = Checkpoint.objects.create(job=job, step=info.step, path=path, size_bytes=dir_size(info.path),
                                             metrics=metrics)
            RunEvent.objects.create(job=job, kind="checkpoint", step=info.step,
                                    message=f"checkpoint at step {info.step}", data={"checkpoint": ckpt.pk})
            created.append(ckpt)
        elif ckpt.status != CheckpointStatus.AVAILABLE or ckpt.path != path or (metrics and ckpt.metrics != metrics):
            ckpt.status, ckpt.path, ckpt.size_bytes = CheckpointStatus.AVAILABLE, path, dir_size(info.path)
            ckpt.metrics = metrics or ckpt.metrics
            ckpt.save(update_fields=["status", "path", "size_bytes", "metrics", "updated_at"])
    on_disk = {i.step for i in infos} | present
    newest = max(on_disk, default=None)
    for step, ckpt in existing.items():
        if step not in on_disk and ckpt.status == CheckpointStatus.AVAILABLE and not Path(ckpt.path).exists():
            ckpt.status = CheckpointStatus.DELETED if newest is not None and newest > step else CheckpointStatus.MISSING
            ckpt.save(update_fields=["status", "updated_at"])
    return created


# -- attempt and job state ---------------------------------------------------------------------

def _finish_attempt(job: Job, attempt: JobAttempt) -> None:
    info = read_json(attempt_dir(job, attempt.number).exit) or {}
    rc = info.get("returncode")
    if info.get("cancelled"):
        state = JobState.CANCELLED
    elif info.get("lost"):  # Ray reported the submitted job dead (training.ray_cluster.lost_reason)
        state = JobState.LOST
        RunEvent.objects.create(job=job, kind="lost", step=job.last_step or None,
                                message=f"attempt {attempt.number} lost: {info['lost']}"[:500],
                                data={"attempt": attempt.number, "stopped": True})
    elif rc == 0:
        state = JobState.SUCCEEDED
    else:
        state = JobState.FAILED
    ended = info.get("ended_at")
    attempt.state, attempt.returncode = state, rc if isinstance(rc, int) else None
    attempt.ended_at = datetime.fromtimestamp(ended, UTC) if isinstance(ended, (int, float)) else timezone.now()
    attempt.save(update_fields=["state", "returncode", "ended_at"])


def _mark_lost(job: Job, attempt: JobAttempt) -> None:
    """Give the attempt up and stop it: a lost trainer must not go on writing into the run directory."""
    attempt.state, attempt.ended_at = JobState.LOST, timezone.now()
    attempt.save(update_fields=["state", "ended_at"])
    stopped = stop_lost_attempt(job, attempt)
    message = (f"attempt {attempt.number} lost: its processes were stopped" if stopped else
               f"attempt {attempt.number} lost on {attempt.host or 'another host'}: asked it to stop "
               "(this worker cannot see its processes)")
    RunEvent.objects.create(job=job, kind="lost", step=job.last_step or None, message=message,
                            data={"attempt": attempt.number, "stopped": stopped})


def _on_this_host(attempt: JobAttempt) -> bool:
    return not attempt.host or attempt.host == socket.gethostname()[:200]


def stop_lost_attempt(job: Job, attempt: JobAttempt) -> bool:
    """Kill what is left of the attempt when it ran on this host (True once nothing of it runs).

    From another host only the LOST marker can be left in its folder: its supervisor, if it still
    runs, stops the trainer itself on seeing it.
    """
    from training.supervisor import attempt_stopped, kill_attempt

    adir = attempt_dir(job, attempt.number)
    if attempt_stopped(adir.path):
        return True
    if _on_this_host(attempt):
        return kill_attempt(adir.path)
    with contextlib.suppress(OSError):  # a folder that is gone has nothing to tell
        adir.lost.write_text(str(time.time()))
    return False


def ensure_no_live_attempt(job: Job) -> None:
    """Refuse a new attempt while a trainer of an earlier, given-up attempt may still run.

    On this host the leftovers are killed first; on another host its supervisor's exit.json or an
    acknowledged kill (KILLED, from `training.supervisor --kill` on that host) is needed.
    """
    if not job.run_dir:
        return
    for attempt in job.attempts.filter(state=JobState.LOST, supervisor_pid__isnull=False).order_by("number"):
        if stop_lost_attempt(job, attempt):
            continue
        adir = attempt_dir(job, attempt.number)
        if _on_this_host(attempt):
            raise ApplicationError(f"Attempt {attempt.number} of job #{job.pk} still has running processes that "
                                   "could not be stopped; stop them, then resume again.")
        raise ApplicationError(
            f"Attempt {attempt.number} of job #{job.pk} ran on {attempt.host}, and this server cannot check that "
            f"its trainer has stopped. On {attempt.host}, run `python -m training.supervisor --attempt-dir "
            f"{adir.path} --kill` (or wait for its supervisor to notice it was given up), then resume again.")


def _error_text(job: Job, attempt: JobAttempt) -> str:
    adir = attempt_dir(job, attempt.number)
    info = read_json(adir.exit) or {}
    lines = tail_lines(adir.log, ERROR_TAIL_LINES)
    head = f"exit code {info.get('returncode')}" + (f": {info['error']}" if info.get("error") else "")
    return head + ("\n" + "\n".join(lines) if lines else "")


def _short_end(job: Job, attempt: JobAttempt) -> str:
    """Why a clean exit came before the planned steps ("" when it did not)."""
    from training.run_end import short_end_reason

    planned = (job.config or {}).get("total_steps")
    if not planned or (job.last_step or 0) >= planned:
        return ""
    try:
        with open(attempt_dir(job, attempt.number).log, encoding="utf-8", errors="replace") as fh:
            text = fh.read(4 * 1024 * 1024)  # VERL prints its plan as it starts
    except OSError:
        text = ""
    return short_end_reason(text, int(planned), int(job.last_step or 0))


def _set_state(job: Job, state: str, message: str, **fields: Any) -> bool:
    """Conditional transition from the state we read (a concurrent cancel/resume wins)."""
    now = timezone.now()
    final = state in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.LOST)
    changed = Job.objects.filter(pk=job.pk, state=job.state).update(
        state=state, updated_at=now, **({"finished_at": now} if final else {}), **fields)
    if changed:
        job.state = state
        RunEvent.objects.create(job=job, kind="state", step=job.last_step or None, message=message[:500],
                                data={"state": state})
    return bool(changed)


def adopt_orphaned_supervisor(job: Job) -> bool:
    """A worker killed while it spawned the supervisor leaves a run going that the database does not know
    (the job `starting`, its attempt without a pid). Once the supervisor's pid file is older than the
    staleness limit and its run has shown a heartbeat (or ended), record it as the launch would have; the
    launch, if it was only slow, then finds the pid taken and changes nothing (see start.job_launch)."""
    if job.state != JobState.STARTING or not job.run_dir:
        return False  # checked first: every sync of every job comes through here
    latest = job.attempts.order_by("-number").first()
    if latest is None or latest.supervisor_pid is not None:
        return False
    adir = attempt_dir(job, latest.number)
    try:
        pid = int(adir.supervisor_pid.read_text().strip())
        written = adir.supervisor_pid.stat().st_mtime
    except (OSError, ValueError):
        return False
    beat = read_json(adir.heartbeat)
    if time.time() - written <= settings.RUN_HEARTBEAT_STALE_S or (beat is None and not adir.exit.exists()):
        return False
    started = datetime.fromtimestamp(written, UTC)
    host = str((beat or {}).get("host") or "")[:200]
    if not JobAttempt.objects.filter(pk=latest.pk, supervisor_pid__isnull=True).update(
            supervisor_pid=pid, host=host, state=JobState.RUNNING, started_at=started):
        return False
    Job.objects.filter(pk=job.pk, state=JobState.STARTING).update(
        state=JobState.RUNNING, attempt_count=latest.number, started_at=job.started_at or started, error="",
        updated_at=timezone.now())
    job.refresh_from_db()
    RunEvent.objects.create(job=job, kind="state", step=job.last_step or None,
                            message=f"running (attempt {latest.number}: the worker stopped while starting it; "
                                    f"its supervisor, pid {pid}, was found in the run directory)",
                            data={"state": JobState.RUNNING, "attempt": latest.number, "pid": pid})
    return True


def _update_job_state(job: Job) -> None:
    latest = job.attempts.order_by("-number").first()
    stale = settings.RUN_HEARTBEAT_STALE_S
    if job.state == JobState.STARTING and (latest is None or latest.supervisor_pid is None):
        if timezone.now() - job.updated_at > timedelta(seconds=max(120, 4 * stale)):
            _set_state(job, JobState.LOST, "lost: the worker stopped before the run started",
                       error="The worker stopped before the training process started; resume or clone the job.")
        return
    if job.state not in LIVE or latest is None or latest.supervisor_pid is None:
        return  # queued (maybe a resume waiting for its launch) or already final
    if latest.state == JobState.SUCCEEDED:
        short = _short_end(job, latest)
        _set_state(job, JobState.SUCCEEDED, f"succeeded, {short[0].lower()}{short[1:]}" if short else "succeeded",
                   **({"error": short} if short else {}))
    elif latest.state == JobState.CANCELLED:
        _set_state(job, JobState.CANCELLED, "cancelled")
    elif latest.state == JobState.FAILED:
        error = _error_text(job, latest)
        _set_state(job, JobState.FAILED, f"failed ({error.splitlines()[0]})", error=error[-5000:])
    elif latest.state == JobState.LOST:
        ray_reason = (read_json(attempt_dir(job, latest.number).exit) or {}).get("lost")
        if ray_reason:
            _set_state(job, JobState.LOST, f"lost: {ray_reason}"[:500],
                       error=f"The Ray cluster lost the job: {ray_reason}. Resume from the last checkpoint.")
        else:
            _set_state(job, JobState.LOST, "lost: no heartbeat from the training supervisor",
                       error=f"No heartbeat for more than {stale} s: the worker or the training process died. "
                             "Resume from the last checkpoint.")


def sync_job(job: Job) -> list[MetricPoint]:
    """One pass over a job's live attempts; returns the metric points it added or changed."""
    from training.supervisor import attempt_state
    from webapp.runs.services.attach import sync_attached

    if job.attached_dir:  # a run the app did not launch: followed through its own folder
        return sync_attached(job)

    new_points: list[MetricPoint] = []
    with transaction.atomic():
        locked = Job.objects.select_for_update(skip_locked=True).filter(pk=job.pk).first()
        if locked is None:
            return []  # another sync holds it
        job = locked
        adopt_orphaned_supervisor(job)
        if job.run_dir:
            latest_step, beat = None, None
            for attempt in job.attempts.filter(supervisor_pid__isnull=False, state__in=LIVE).order_by("number"):
                adir = attempt_dir(job, attempt.number)
                # Read the state first: exit.json is written after the child's last metrics line.
                status = attempt_state(adir.path, settings.RUN_HEARTBEAT_STALE_S)
                points = ingest_attempt_metrics(job, attempt)
                new_points += points
                if points:
                    latest_step = max(p.step for p in points)
                beat = (read_json(adir.heartbeat) or {}).get("time", beat)
                if status == "exited":
                    _finish_attempt(job, attempt)
                elif status == "lost":
                    # What it saved before it is given up (and killed) is the job's: list that first.
                    sync_checkpoints(job)
                    _mark_lost(job, attempt)
            sync_checkpoints(job)
            fields = {}
            if latest_step is not None:
                fields["last_step"] = job.last_step = latest_step
            if isinstance(beat, (int, float)):
                fields["heartbeat_at"] = job.heartbeat_at = datetime.fromtimestamp(beat, UTC)
            if fields:
                Job.objects.filter(pk=job.pk).update(**fields)
        _update_job_state(job)
    _after_sync(job, new_points)
    return new_points


def _after_sync(job: Job, new_points: list[MetricPoint]) -> None:
    fresh = Job.objects.get(pk=job.pk)
    for receiver, result in job_synced.send_robust(sender=Job, job=fresh, new_points=new_points):
        if isinstance(result, Exception):  # a subscriber's bug must not stop ingestion
            log.error("job_synced receiver %r failed for job %s", receiver, job.pk, exc_info=result)


def sync_active_jobs() -> int:
    """Sync every job that is active or still has a live attempt; returns how many were synced."""
    ids = list(Job.objects.filter(Q(state__in=ACTIVE_STATES) | Q(attempts__state__in=LIVE,
                                                                  attempts__supervisor_pid__isnull=False))
               .order_by("pk").values_list("pk", flat=True).distinct())
    for job_id in ids:
        try:
            job = Job.objects.filter(pk=job_id).first()
            if job is not None:
                sync_job(job)
        except Exception:  # noqa: BLE001 - one broken run must not stop the others
            log.exception("syncing job %s failed", job_id)
    return len(ids)
