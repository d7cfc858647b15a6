"""A stall is met with a stack dump first: of the real hung trainer process on this host, kept in the attempt's
stacks/ folder, put in the bundle and sent in the stall notification (secrets scrubbed); on another host a worker
of the job's queue takes it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from webapp.runs.models import JobAttempt, JobState, RunEvent

pytestmark = pytest.mark.django_db

HANG = """
import time
def waiting_for_a_dead_ray_worker():
    print("ready", flush=True)
    time.sleep(120)
waiting_for_a_dead_ray_worker()
"""


@pytest.fixture
def stalled(launched_job, project, admin_user, settings, monkeypatch):
    from webapp.notifications.models import Delivery
    from webapp.notifications.services import hook_create

    settings.NOTIFY_ALLOW_PRIVATE_HOSTS = True
    monkeypatch.setenv("SOME_API_TOKEN", "planted-token-in-env-31337")
    hook_create(project=project, user=admin_user, name="ops", kind="json", url="http://127.0.0.1:9/stall",
                events=["job.stalled"])
    job = launched_job()
    job.config = {**job.config, "stall": {"after_s": 1}}
    job.save(update_fields=["config"])
    attempt = job.attempts.get()
    JobAttempt.objects.filter(pk=attempt.pk).update(state=JobState.RUNNING)
    adir = Path(job.run_dir) / "attempts" / str(attempt.number)
    adir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-c", HANG + "# planted-token-in-env-31337\n"], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "WORKBENCH_ATTEMPT_DIR": str(adir.resolve())})
    assert proc.stdout.readline().strip() == "ready"
    yield job, attempt, adir, Delivery
    proc.kill()
    proc.wait()


def test_the_stall_dumps_the_hung_trainer_first_and_sends_the_dump(stalled, monkeypatch):
    from webapp.monitoring.services.stall import stall_check

    monkeypatch.setattr("webapp.core.queue.enqueue", lambda *a, **k: None)
    job, attempt, adir, Delivery = stalled
    assert stall_check(job, now=attempt.started_at.timestamp() + 10).stalled
    [kept] = sorted((adir / "stacks").glob("[0-9]*.txt"))
    text = kept.read_text()
    assert "waiting_for_a_dead_ray_worker" in text and "planted-token-in-env-31337" not in text
    assert RunEvent.objects.filter(job=job, kind="stacks").count() == 1
    [delivery] = Delivery.objects.filter(event="job.stalled")
    assert "stack dump taken first is attached" in delivery.payload["message"]
    assert "waiting_for_a_dead_ray_worker" in delivery.payload["data"]["stacks"]
    # and the bundle carries it
    from webapp.monitoring.services.bundle import build_bundle

    built = build_bundle(job, name="t")
    assert f"attempts/{attempt.number}/stacks/{kept.name}" in {f["name"] for f in built.files}


def test_on_another_host_a_worker_of_the_jobs_queue_takes_the_dump(stalled, monkeypatch):
    from webapp.monitoring.services.stacks import capture_run
    from webapp.monitoring.services.stall import stall_check

    job, attempt, adir, Delivery = stalled
    JobAttempt.objects.filter(pk=attempt.pk).update(host="gpu-worker-7")
    sent = []
    monkeypatch.setattr("webapp.monitoring.services.stacks.enqueue", lambda task, *args, queue: sent.append(
        (task, args, queue)))
    monkeypatch.setattr("webapp.core.queue.enqueue", lambda *a, **k: None)
    assert stall_check(job, now=attempt.started_at.timestamp() + 10).stalled
    assert sent == [("jobs.tasks.capture_stacks", (job.pk, attempt.number), job.queue)]
    assert not (adir / "stacks").exists()  # not dumped from here
    assert "A worker on gpu-worker-7 is taking a stack dump" in Delivery.objects.get().payload["message"]
    text = capture_run(job_id=job.pk, attempt_number=attempt.number)  # what that worker runs
    assert "waiting_for_a_dead_ray_worker" in text
    follow_up = Delivery.objects.order_by("-id").first()
    assert "waiting_for_a_dead_ray_worker" in follow_up.payload["data"]["stacks"]
