"""A real Celery worker process against the real broker (Redis in CI) and the real database."""
from __future__ import annotations

import time

import pytest
from django.conf import settings

from jobs.tasks import ping
from webapp.core.models import AuditLog, Project


@pytest.mark.worker
def test_task_round_trip_through_broker_worker_and_database(celery_worker_proc):
    project = Project.objects.create(slug="ping", name="Ping")
    ping.delay(project.id)
    deadline = time.time() + 300  # only a guard against a hang
    while time.time() < deadline and not AuditLog.objects.filter(action="worker.ping", project=project).exists():
        time.sleep(0.2)
    assert AuditLog.objects.filter(action="worker.ping", project=project).exists(), \
        celery_worker_proc.log_path.read_text()[-3000:]


def test_broker_follows_redis_url():
    if settings.REDIS_URL:
        assert settings.CELERY_BROKER_URL.startswith(("redis://", "redis+socket://"))
    else:  # the folder broker, written atomically
        assert settings.CELERY_BROKER_URL == "filesystem://"
        assert settings.CELERY_BROKER_TRANSPORT == "jobs.fsbroker:Transport"
