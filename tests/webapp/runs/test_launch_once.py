"""A reviewed launch is consumed once: its launch token makes one job; the same review posted again shows
that job (409), the review page can ask whether it was launched, and the service refuses a second job."""
from __future__ import annotations

import uuid

import pytest

from tests.webapp.runs.test_runs_views import form_data
from webapp.runs.models import Job
from webapp.runs.services import plan

pytestmark = pytest.mark.django_db


def test_the_same_review_posted_twice_launches_one_job(project, engineer, as_user, prompts_version, tiny_model,
                                                       reward_fn, no_enqueue):
    client = as_user(engineer)
    resp = client.post(f"/p/{project.slug}/jobs/new/", form_data(prompts_version, tiny_model, reward_fn,
                                                                 action="review"))
    token = resp.context["launch_token"]
    assert f'name="launch_token" value="{token}"' in resp.content.decode()
    status_url = f"/p/{project.slug}/jobs/launched/{token}/"
    assert client.get(status_url).json() == {"job": None, "url": None}
    posted = {**dict(resp.context["hidden"]), "launch_token": str(token), "action": "launch"}
    first = client.post(f"/p/{project.slug}/jobs/new/", posted)
    job = Job.objects.get()
    assert first.status_code == 302 and job.launch_token == token
    again = client.post(f"/p/{project.slug}/jobs/new/", posted)
    assert again.status_code == 409 and Job.objects.count() == 1
    assert f'href="/p/{project.slug}/jobs/{job.pk}/"' in again.content.decode()
    assert client.get(status_url).json() == {"job": job.pk, "url": f"/p/{project.slug}/jobs/{job.pk}/"}
    # a new review draws a new token, and so launches a new job
    review = client.post(f"/p/{project.slug}/jobs/new/", {**posted, "action": "review"})
    assert review.context["launch_token"] != token


def test_the_service_makes_one_job_per_launch_token(project, engineer, prompts_version, tiny_model, reward_spec,
                                                    no_enqueue, monkeypatch):
    token = uuid.uuid4()
    inputs = {"project": project, "user": engineer, "kind": "grpo", "backend": "local", "preset": "demo-cpu",
              "hp_overrides": {"max_steps": 10}, "dataset_version": prompts_version, "reward_spec": reward_spec,
              "base_model": tiny_model, "include_unreviewed": True, "launch_token": token}
    job = plan.job_create(**inputs)
    with pytest.raises(plan.AlreadyLaunched) as raised:
        plan.job_create(**inputs)
    assert raised.value.job == job
    # two requests at once: both pass the first look, the unique column refuses the second insert
    real, looks = plan.launched_job, []

    def first_look_misses(project, token):
        looks.append(token)
        return None if len(looks) == 1 else real(project, token)

    monkeypatch.setattr(plan, "launched_job", first_look_misses)
    with pytest.raises(plan.AlreadyLaunched):
        plan.job_create(**inputs)
    assert Job.objects.count() == 1


def test_status_needs_an_engineer(project, viewer, outsider, as_user):
    url = f"/p/{project.slug}/jobs/launched/{uuid.uuid4()}/"
    assert as_user(viewer).get(url).status_code == 403
    assert as_user(outsider).get(url).status_code == 404


def test_the_api_launches_once_per_launch_token(project, engineer, api_for, prompts_version, tiny_model, reward_fn,
                                                no_enqueue):
    api, token = api_for(engineer), str(uuid.uuid4())
    body = {"kind": "grpo", "preset": "demo-cpu", "dataset": str(prompts_version.pk), "model": tiny_model.name,
            "reward": [reward_fn.name], "set": {"max_steps": 5}, "launch_token": token}
    first = api.post(f"/api/projects/{project.slug}/jobs/", body, format="json")
    assert first.status_code == 201, first.json()
    again = api.post(f"/api/projects/{project.slug}/jobs/", body, format="json")
    assert again.status_code == 409 and again.json()["job"]["id"] == first.json()["id"]
    assert Job.objects.count() == 1
