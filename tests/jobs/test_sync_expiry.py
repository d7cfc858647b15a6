"""The periodic sync cannot pile up: after a worker outage the queued syncs expire unrun, ahead of a launch."""
from __future__ import annotations

import re
import time

import pytest
from django.conf import settings

from jobs.celery import app
from webapp.core.models import AuditLog, Project


def test_beat_sends_syncs_that_expire_within_a_few_intervals():
    entry = settings.CELERY_BEAT_SCHEDULE["sync-runs"]
    expires = entry["options"]["expires"]
    assert entry["schedule"] <= expires <= max(10.0, 3 * entry["schedule"])


@pytest.mark.worker
def test_a_worker_back_from_an_outage_drops_stale_syncs_and_runs_the_next_task_at_once(transactional_db, request):
    options = dict(settings.CELERY_BEAT_SCHEDULE["sync-runs"]["options"])
    options["expires"] = 1.0  # the configured expiry, shortened so the test need not wait it out
    for _ in range(60):  # two minutes of beat at 2 s while no worker consumed
        app.send_task("jobs.tasks.sync_runs", **options)
    time.sleep(1.5)
    project = Project.objects.create(slug="after-outage", name="After outage")
    app.send_task("jobs.tasks.ping", args=[project.pk])
    proc = request.getfixturevalue("celery_worker_proc")  # the worker comes back
    deadline = time.time() + 300  # only a guard against a hang: the log below shows the syncs were not run
    while time.time() < deadline and not AuditLog.objects.filter(action="worker.ping", project=project).exists():
        time.sleep(0.1)
    log = proc.log_path.read_text()
    assert AuditLog.objects.filter(action="worker.ping", project=project).exists(), log[-3000:]
    assert not re.search(r"jobs\.tasks\.sync_runs\[[^\]]+\] succeeded", log)  # none of the stale syncs ran
    assert log.count("expired") >= 60 or log.count("Discarding revoked task") >= 60, log[-3000:]
