"""Runs tell the project's hooks when they finish, fail or stall and when a health rule trips."""
from __future__ import annotations

import pytest

from webapp.notifications import services
from webapp.notifications.models import Delivery

pytestmark = pytest.mark.django_db


def test_runs_notify_when_they_finish_fail_or_stall_and_when_a_rule_trips(project, admin_user, settings,
                                                                          launched_job):
    from webapp.monitoring.hooks import after_sync
    from webapp.monitoring.services.stall import notify_final_state, stall_check
    from webapp.runs.models import Job, JobAttempt, JobState, MetricPoint

    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    services.hook_create(project=project, user=admin_user, name="team", kind="email", emails="t@x.org")
    job = launched_job()
    Job.objects.filter(pk=job.pk).update(config={**job.config, "stall": {"after_s": 30},
                                                 "guard_rules": [{"rule": "kl", "patience": 1, "action": "warn"}]})
    job.refresh_from_db()
    attempt = job.attempts.order_by("-number").first()
    JobAttempt.objects.filter(pk=attempt.pk).update(state=JobState.RUNNING)
    after_sync(job, [MetricPoint.objects.create(job=job, attempt=attempt.number, step=1, name="actor/kl_loss",
                                                value=0.9, wall_time=attempt.started_at.timestamp() + 1)])
    stall_check(job, now=attempt.started_at.timestamp() + 100)
    Job.objects.filter(pk=job.pk).update(state=JobState.FAILED, error="Traceback…\nRuntimeError: out of memory")
    job.refresh_from_db()
    assert notify_final_state(job) and not notify_final_state(job)  # once per final state
    events = list(Delivery.objects.order_by("id").values_list("event", flat=True))
    assert events == ["guard.tripped", "job.stalled", "job.failed"]
    failed = Delivery.objects.get(event="job.failed").payload
    assert "RuntimeError: out of memory" in failed["message"] and failed["job"]["figures"]["KL"] == 0.9
    assert failed["url"].endswith(f"/p/{project.slug}/jobs/{job.pk}/")
