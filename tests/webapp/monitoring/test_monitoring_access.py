"""Access rules for every monitoring page and endpoint: outsiders 404, too-low roles 403."""
from __future__ import annotations

import pytest

from tests.webapp.monitoring.test_blind import make_task
from webapp.core.models import Project

pytestmark = pytest.mark.django_db


@pytest.fixture
def setup(make_job, checkpoint, points, project):
    job = make_job()
    ckpt = checkpoint(job, 5)
    points(job, "actor/kl_loss", [0.05] * 6)
    task = make_task(project, source="checkpoint", b_checkpoint=ckpt, responses=[("y", "x")])
    return {"job": job, "ckpt": ckpt, "task": task, "item": task.pairs.get(), "slug": project.slug}


def pages(s):
    base = f"/p/{s['slug']}/monitor"
    j = s["job"].pk
    return {
        "viewer_get": [f"/p/{s['slug']}/jobs/{j}/", f"{base}/jobs/{j}/samples/", f"{base}/jobs/{j}/checkpoints/",
                       f"{base}/compare/?jobs={j}",
                       f"{base}/human-evals/", f"{base}/arenas/", f"{base}/blind/{s['task'].pk}/"],
        "reviewer_get": [f"{base}/blind/{s['task'].pk}/judge/"],
        "engineer_get": [f"{base}/jobs/{j}/checkpoints/5/rollback/"],
        "engineer_post": [f"{base}/jobs/{j}/checkpoints/5/promote/", f"{base}/jobs/{j}/checkpoints/5/rollback/",
                          f"{base}/jobs/{j}/checkpoints/5/export/", f"{base}/jobs/{j}/checkpoints/5/evaluate/",
                          f"{base}/jobs/{j}/checkpoints/5/human-eval/", f"{base}/blind/{s['task'].pk}/toggle/",
                          f"{base}/blind/{s['task'].pk}/assign/", f"{base}/blind/{s['task'].pk}/auto-judge/"],
    }


def apis(s):
    base = f"/api/projects/{s['slug']}/monitor"
    j, t = s["job"].pk, s["task"].pk
    return {
        "viewer_get": [f"{base}/jobs/{j}/metrics/?names=actor/kl_loss", f"{base}/jobs/{j}/live/?names=actor/kl_loss",
                       f"{base}/jobs/{j}/metric-names/", f"{base}/jobs/{j}/events/", f"{base}/jobs/{j}/checkpoints/",
                       f"{base}/compare/?jobs={j}&name=actor/kl_loss", f"{base}/blind/", f"{base}/blind/{t}/",
                       f"{base}/blind/{t}/judges/", f"{base}/arenas/"],
        "engineer_post": [f"{base}/jobs/{j}/checkpoints/5/promote/", f"{base}/jobs/{j}/rollback/",
                          f"{base}/jobs/{j}/checkpoints/5/evaluate/", f"{base}/blind/{t}/open/",
                          f"{base}/blind/{t}/assign/", f"{base}/blind/{t}/judges/", f"{base}/blind/{t}/export/"],
        "reviewer_post": [f"{base}/blind/{t}/verdicts/"],
    }


def test_outsider_gets_404_everywhere(setup, outsider, as_user, api_for):
    client, api = as_user(outsider), api_for(outsider)
    p, a = pages(setup), apis(setup)
    for path in p["viewer_get"] + p["reviewer_get"] + p["engineer_get"]:
        assert client.get(path).status_code == 404, path
    for path in p["engineer_post"]:
        assert client.post(path).status_code == 404, path
    for path in a["viewer_get"]:
        assert api.get(path).status_code == 404, path
    for path in a["engineer_post"] + a["reviewer_post"]:
        assert api.post(path, {}, format="json").status_code == 404, path


def test_viewer_reads_but_cannot_act(setup, viewer, as_user, api_for):
    client, api = as_user(viewer), api_for(viewer)
    p, a = pages(setup), apis(setup)
    for path in p["viewer_get"]:
        assert client.get(path).status_code == 200, path
    for path in p["reviewer_get"] + p["engineer_get"]:
        assert client.get(path).status_code == 403, path
    for path in p["engineer_post"]:
        assert client.post(path).status_code == 403, path
    for path in a["viewer_get"]:
        assert api.get(path).status_code == 200, path
    for path in a["engineer_post"] + a["reviewer_post"]:
        assert api.post(path, {}, format="json").status_code == 403, path


def test_reviewer_judges_but_cannot_promote_or_roll_back(setup, reviewer, as_user, api_for):
    client, api = as_user(reviewer), api_for(reviewer)
    p, a = pages(setup), apis(setup)
    assert client.get(p["reviewer_get"][0]).status_code == 200
    for path in p["engineer_post"]:
        assert client.post(path).status_code == 403, path
    for path in a["engineer_post"]:
        assert api.post(path, {"step": 5}, format="json").status_code == 403, path
    r = api.post(a["reviewer_post"][0], {"pair": setup["item"].pk, "choice": "left"}, format="json")
    assert r.status_code == 201


def test_engineer_can_open_the_action_pages(setup, engineer, as_user):
    client = as_user(engineer)
    assert client.get(pages(setup)["engineer_get"][0]).status_code == 200
    body = client.get(pages(setup)["viewer_get"][0]).content.decode()
    assert "Roll back" in body and "Promote" in body


def test_viewer_sees_no_action_buttons(setup, viewer, as_user):
    body = as_user(viewer).get(pages(setup)["viewer_get"][0]).content.decode()
    assert 'id="mon-charts"' in body and "js-rollback" not in body and ">Promote<" not in body


def test_a_job_of_another_project_is_404_through_this_project(setup, engineer, make_job, as_user, api_for):
    other = Project.objects.create(slug="other", name="Other")
    foreign = make_job("foreign", project_=other)
    slug = setup["slug"]
    assert as_user(engineer).get(f"/p/{slug}/monitor/jobs/{foreign.pk}/").status_code == 404
    assert api_for(engineer).get(f"/api/projects/{slug}/monitor/jobs/{foreign.pk}/metrics/?names=x") \
        .status_code == 404
