"""Stack dumps of a stalled run: taken before anything else happens to it (a cancel-and-resume would kill the
very processes that explain the hang), kept in `attempts/<K>/stacks/`, and sent with the stall notification.

The dump is taken where the trainer runs: here when the attempt was launched on this host, else by a worker of
the job's queue (the host that launched it), which then sends the dump in a notification of its own.
"""
from __future__ import annotations

import logging
import socket

from training.diagnostics import dump_stacks, write_stacks
from training.rundir import RunDir
from webapp.core.queue import CAPTURE_STACKS, enqueue
from webapp.monitoring.services.bundle import bundle_scrubber
from webapp.notifications.services import notify
from webapp.runs.models import Job, JobAttempt, RunEvent

logger = logging.getLogger(__name__)
DUMP_S = 30  # the whole dump, every process together
NOTIFY_CHARS = 12000  # of the dump in a notification (the file keeps all of it)


def _here(attempt: JobAttempt) -> bool:
    return not attempt.host or attempt.host == socket.gethostname()[:200]


def take(job: Job, attempt: JobAttempt) -> str:
    """Dump the attempt's stacks on this host, keep them and scrub them; returns the text ('' on failure)."""
    adir = RunDir(job.run_dir).attempt(attempt.number)
    try:
        text = bundle_scrubber().text(dump_stacks(adir.path, timeout_s=DUMP_S))
        path = write_stacks(adir.path, text)
    except OSError as exc:
        logger.warning("stack dump of job %s attempt %s failed: %s", job.pk, attempt.number, exc)
        return ""
    RunEvent.objects.create(job=job, kind="stacks", step=job.last_step or None,
                            message=f"Stack dump of attempt {attempt.number} kept in {path.name}"[:500],
                            data={"attempt": attempt.number, "file": str(path)})
    return text


def on_stall(job: Job, attempt: JobAttempt) -> tuple[str, str]:
    """(the dump, or '' when another host takes it; a sentence for the notification)."""
    if _here(attempt):
        text = take(job, attempt)
        return text, "The stack dump taken first is attached." if text else "The stack dump failed (see the log)."
    enqueue(CAPTURE_STACKS, job.pk, attempt.number, queue=job.queue or "cpu")
    return "", f"A worker on {attempt.host} is taking a stack dump; it follows in its own notification."


def capture_run(*, job_id: int, attempt_number: int) -> str:
    """The task body on the trainer's host: dump, keep, notify."""
    job = Job.objects.select_related("project").filter(pk=job_id).first()
    attempt = JobAttempt.objects.filter(job_id=job_id, number=attempt_number).first()
    if job is None or attempt is None:
        return ""
    text = take(job, attempt)
    notify(job.project, "job.stalled", job=job, data={"stacks": text[:NOTIFY_CHARS]},
           message=f"Stack dump of the stalled run #{job.pk} (attempt {attempt_number})")
    return text
