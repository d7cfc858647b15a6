"""The run page's live poll: a fixed query budget, however many runs, events and checkpoints there are, and
every new step, event, checkpoint and stall mark seen on the next poll."""
from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from webapp.monitoring.models import GuardRulesRecord
from webapp.runs.models import Job, RunEvent

pytestmark = pytest.mark.django_db

KL = "actor/kl_loss"
NAMES = f"{KL},critic/score/mean"
# session, user, project with the caller's role, the job with its run-wide state, the new points
LIVE_POLL_QUERIES = 5
last_queries = []


@pytest.fixture
def page(viewer) -> Client:
    client = Client()
    client.force_login(viewer)  # as the run page polls: its session
    return client


def poll(client: Client, job: Job, **params) -> tuple[dict, int]:
    with CaptureQueriesContext(connection) as ctx:
        r = client.get(f"/api/projects/{job.project.slug}/monitor/jobs/{job.pk}/live/", {"names": NAMES, **params})
    assert r.status_code == 200, r.content
    last_queries[:] = ctx.captured_queries
    return r.json(), len(ctx.captured_queries)


def test_a_live_poll_keeps_its_query_budget_however_much_the_run_holds(make_job, points, checkpoint, page):
    job = make_job(last_step=40)
    points(job, KL, [0.1] * 40)
    points(job, "critic/score/mean", [0.5] * 40)
    _, empty_run = poll(page, job, since_step=38, since_event=0)
    for step in range(5, 41, 5):
        checkpoint(job, step)
        RunEvent.objects.create(job=job, kind="checkpoint", step=step, message=f"saved step {step}")
    last = RunEvent.objects.filter(job=job).order_by("-id").first()
    body, n = poll(page, job, since_step=38, since_event=last.pk)
    assert n == empty_run <= LIVE_POLL_QUERIES, [q["sql"][:90] for q in last_queries]
    assert body["series"][KL]["step"] == [39, 40] and body["events"] == [] and body["checkpoint_count"] == 8
    _, with_events = poll(page, job, since_step=38, since_event=0)
    assert with_events == n + 1  # new events cost one query more, only when there are some


def test_the_next_poll_sees_a_new_step_event_checkpoint_and_stall(make_job, points, checkpoint, page):
    job = make_job(last_step=10)
    points(job, KL, [0.1] * 10)
    first, _ = poll(page, job, since_step=10, since_event=0)
    again, _ = poll(page, job, since_step=10, since_event=0)
    assert first == again and first["series"][KL]["step"] == [] and first["stall"] == {"stalled": False}

    points(job, KL, [0.2], start_step=11)
    Job.objects.filter(pk=job.pk).update(last_step=11)
    body, _ = poll(page, job, since_step=10, since_event=0)
    assert body["series"][KL]["step"] == [11] and body["job_last_step"] == 11 and body["last_step"] == 11

    event = RunEvent.objects.create(job=job, kind="guard_rule", step=11, message="KL above 0.1")
    body, _ = poll(page, job, since_step=11, since_event=0)
    assert [e["id"] for e in body["events"]] == [event.pk]
    body, _ = poll(page, job, since_step=11, since_event=event.pk)
    assert body["events"] == []

    checkpoint(job, 11)
    after, _ = poll(page, job, since_step=11, since_event=event.pk)
    assert after["checkpoint_count"] == 1 and after["checkpoints_key"] != body["checkpoints_key"]

    since = timezone.now()
    GuardRulesRecord.objects.create(job=job, stalled_since=since, stall={"idle_s": 900})
    body, _ = poll(page, job, since_step=11, since_event=event.pk)
    assert body["stall"] == {"stalled": True, "since": since.isoformat(), "idle_s": 900}


def test_a_poll_of_another_projects_run_reads_nothing_of_it(make_job, project, page, django_user_model):
    from webapp.core.models import Project

    other = Project.objects.create(slug="other", name="Other")
    foreign = make_job(project_=other)
    r = page.get(f"/api/projects/{other.slug}/monitor/jobs/{foreign.pk}/live/", {"names": KL})
    assert r.status_code in (403, 404) and b"series" not in r.content
    r = page.get(f"/api/projects/{project.slug}/monitor/jobs/{foreign.pk}/live/", {"names": KL})
    assert r.status_code == 404 and b"series" not in r.content
