"""Stall detection on a running job: marked, shown, audited; cleared when steps come back; cancel-and-resume."""
from __future__ import annotations

import pytest

from webapp.core.models import AuditLog
from webapp.monitoring.services.stall import stall_check, stall_status
from webapp.runs.models import Job, JobAttempt, JobState, MetricPoint, RunEvent

pytestmark = pytest.mark.django_db


def _running(job: Job, **stall) -> tuple[Job, JobAttempt, float]:
    if stall:
        Job.objects.filter(pk=job.pk).update(config={**job.config, "stall": stall})
        job.refresh_from_db()
    attempt = job.attempts.order_by("-number").first()
    JobAttempt.objects.filter(pk=attempt.pk).update(state=JobState.RUNNING)
    attempt.refresh_from_db()
    t0 = attempt.started_at.timestamp()
    return job, attempt, t0


def _steps(job: Job, attempt: int, times: list[float], start: int = 1) -> None:
    MetricPoint.objects.bulk_create([MetricPoint(job=job, attempt=attempt, step=start + i, name="timing_s/step",
                                                 value=1.0, wall_time=t) for i, t in enumerate(times)])


def test_a_silent_run_is_marked_stalled_once_and_cleared_when_steps_return(launched_job, as_user, viewer):
    job, attempt, t0 = _running(launched_job(), factor=10, floor_s=60)
    _steps(job, attempt.number, [t0 + 10 + 5 * i for i in range(10)])  # a step every 5 s, last at t0 + 55
    assert stall_check(job, now=t0 + 55 + 59).stalled is False  # the floor (60 s) is above 10 × 5 s
    check = stall_check(job, now=t0 + 55 + 61)
    assert check.stalled and check.limit_s == 60 and check.step_s == 5
    stall_check(job, now=t0 + 55 + 120)  # still stalled: no second event
    ev = RunEvent.objects.get(job=job, kind="stalled")
    assert "no new step for 1.0 min" in ev.message and ev.data["action"] == "notify"
    assert AuditLog.objects.filter(action="job.stalled", object_id=str(job.pk)).count() == 1
    assert stall_status(job)["stalled"] is True
    page = as_user(viewer).get(f"/p/{job.project.slug}/jobs/{job.pk}/").content.decode()
    assert 'id="mon-stalled" role="alert">' in page and "no new step for" in page
    _steps(job, attempt.number, [t0 + 200], start=11)
    assert stall_check(job, now=t0 + 201).stalled is False
    assert RunEvent.objects.filter(job=job, kind="stall_cleared").count() == 1
    assert stall_status(job) == {"stalled": False}
    page = as_user(viewer).get(f"/p/{job.project.slug}/jobs/{job.pk}/").content.decode()
    assert 'id="mon-stalled" role="alert" hidden>' in page


def test_before_the_first_step_the_first_step_limit_applies(launched_job):
    job, _attempt, t0 = _running(launched_job(), first_step_s=100)
    assert not stall_check(job, now=t0 + 99).stalled
    assert stall_check(job, now=t0 + 101).stalled


def test_cancel_and_resume_stops_the_hung_attempt_and_resumes_from_the_last_checkpoint(launched_job, checkpoint):
    job, attempt, t0 = _running(launched_job(), action="cancel_resume", after_s=30, max_resumes=1)
    c = checkpoint(job, 4)
    _steps(job, attempt.number, [t0 + i for i in range(1, 6)])
    stall_check(job, now=t0 + 40)
    new = JobAttempt.objects.get(job=job, number=attempt.number + 1)
    assert new.reason == "stall" and new.resume_from == c.path
    assert RunEvent.objects.get(job=job, kind="stalled").data["action"] == "cancel_resume"


def test_finished_or_queued_jobs_are_not_checked(launched_job):
    job, _attempt, t0 = _running(launched_job(), after_s=1)
    Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED)
    job.refresh_from_db()
    assert stall_check(job, now=t0 + 10_000) is None


def test_a_stalled_run_is_caught_by_the_sync_and_notified_to_a_real_receiver(launched_job, project, admin_user,
                                                                            settings, monkeypatch,
                                                                            django_capture_on_commit_callbacks):
    import hashlib
    import hmac
    import json
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from pathlib import Path

    from jobs.tasks import deliver_notification
    from webapp.notifications import services
    from webapp.runs.services import sync_job

    got = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            got.append((dict(self.headers), self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        settings.NOTIFY_ALLOW_PRIVATE_HOSTS = True
        hook = services.hook_create(project=project, user=admin_user, name="ops", kind="json",
                                    url=f"http://127.0.0.1:{server.server_port}/stall", events=["job.stalled"])
        monkeypatch.setattr("webapp.core.queue.enqueue", lambda task, pk, **kw: deliver_notification.apply(args=[pk]))
        job, attempt, _t0 = _running(launched_job(), after_s=1)
        adir = Path(job.run_dir) / "attempts" / str(attempt.number)
        adir.mkdir(parents=True, exist_ok=True)

        def beat(lines: dict[int, float]) -> None:
            with open(adir / "metrics.jsonl", "a") as fh:
                for step, v in lines.items():
                    fh.write(json.dumps({"step": step, "data": {"timing_s/step": v}}) + "\n")
            (adir / "heartbeat").write_text(json.dumps({"time": time.time(), "pid": 1}))

        beat({1: 0.1, 2: 0.1})
        sync_job(job)
        assert not RunEvent.objects.filter(job=job, kind="stalled").exists()
        time.sleep(1.5)
        beat({})  # alive (heartbeat) but no new step
        with django_capture_on_commit_callbacks(execute=True):
            sync_job(job)
        assert RunEvent.objects.filter(job=job, kind="stalled").count() == 1
        [(headers, body)] = got
        ts = headers["X-Workbench-Timestamp"]
        expected = "sha256=" + hmac.new(hook.secret.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(headers["X-Workbench-Signature"], expected)
        payload = json.loads(body)
        assert payload["event"] == "job.stalled" and payload["job"]["id"] == job.pk and "Stalled" in payload["message"]
    finally:
        server.shutdown()
        server.server_close()
