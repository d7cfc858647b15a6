"""API: /api/projects/<slug>/rewards/... per role, versions, checks and test-runs."""
from __future__ import annotations

import pytest

from webapp.rewards.models import RewardTestRun

pytestmark = pytest.mark.django_db


def base(project) -> str:
    return f"/api/projects/{project.slug}/rewards/"


@pytest.mark.parametrize("who", ["viewer", "reviewer", "engineer", "admin_user"])
def test_members_read(request, api_for, project, reward_fn, who):
    api = api_for(request.getfixturevalue(who))
    b = base(project)
    assert api.get(b).json()[0]["name"] == "exact"
    detail = api.get(f"{b}{reward_fn.pk}/").json()
    assert detail["versions"][0]["number"] == 1 and detail["latest_version"]["author"] == "erin"
    assert api.get(f"{b}{reward_fn.pk}/versions/1/").json()["source"] == reward_fn.latest_version.source
    for url in (f"{b}{reward_fn.pk}/versions/", f"{b}templates/", f"{b}models/"):
        assert api.get(url).status_code == 200, url


def test_outsider_gets_404(api_for, outsider, project, reward_fn, exact_source):
    api = api_for(outsider)
    b = base(project)
    assert api.get(b).status_code == 404
    assert api.get(f"{b}{reward_fn.pk}/").status_code == 404
    assert api.post(f"{b}{reward_fn.pk}/test-run/", {"responses": "x"}, format="json").status_code == 404


def test_unauthenticated_is_refused(client, project):
    assert client.get(base(project)).status_code in (401, 403)


@pytest.mark.parametrize("who", ["viewer", "reviewer"])
def test_low_roles_cannot_post(request, api_for, project, reward_fn, exact_source, arith, who):
    api = api_for(request.getfixturevalue(who))
    b = base(project)
    assert api.post(b, {"name": "n", "source": exact_source}, format="json").status_code == 403
    assert api.post(f"{b}{reward_fn.pk}/versions/", {"source": exact_source + "#\n"}, format="json"
                    ).status_code == 403
    assert api.post(f"{b}{reward_fn.pk}/test-run/", {"dataset_version": arith.pk}, format="json").status_code == 403
    assert api.post(f"{b}check/", {"source": exact_source}, format="json").status_code == 403
    assert reward_fn.versions.count() == 1 and not RewardTestRun.objects.exists()


def test_create_save_unchanged_and_refused(api_for, engineer, project, exact_source):
    api = api_for(engineer)
    b = base(project)
    created = api.post(b, {"name": "api-fn", "source": exact_source, "message": "v1"}, format="json")
    assert created.status_code == 201
    pk = created.json()["id"]
    same = api.post(f"{b}{pk}/versions/", {"source": exact_source}, format="json")
    assert same.status_code == 200 and same.json()["created"] is False and "identical" in same.json()["detail"]
    new = api.post(f"{b}{pk}/versions/", {"source": exact_source.replace("1.0", "2.0"), "message": "m"},
                   format="json")
    assert new.status_code == 201 and new.json()["number"] == 2 and len(new.json()["sha256"]) == 64
    bad = api.post(f"{b}{pk}/versions/", {"source": "def compute_score(:\n"}, format="json")
    assert bad.status_code == 400 and bad.json()["lineno"] == 1 and bad.json()["field"] == "source"
    dup = api.post(b, {"name": "api-fn", "source": exact_source}, format="json")
    assert dup.status_code == 400 and dup.json()["field"] == "name"


def test_check_endpoint(api_for, engineer, project):
    api = api_for(engineer)
    out = api.post(f"{base(project)}check/", {"source": "def compute_score(x):\n    return 1\n"}, format="json").json()
    assert out["ok"] is False and out["problems"][0]["lineno"] == 1


def test_test_run_on_a_version_with_limit(api_for, engineer, project, reward_fn, arith):
    resp = api_for(engineer).post(f"{base(project)}{reward_fn.pk}/test-run/",
                                  {"version": 1, "dataset_version": arith.pk, "limit": 4}, format="json")
    assert resp.status_code == 202
    body = resp.json()
    assert body["version"] == 1 and body["mode"] == "reference" and body["sample_count"] == 4
    assert [r["score"] for r in body["results"]] == [1.0] * 4 and body["summary"]["all"]["mean"] == 1.0
    again = api_for(engineer).get(f"{base(project)}test-runs/{body['id']}/").json()
    assert again["results"] == body["results"]
    assert [s["i"] for s in again["summary"]["slowest"]] == [  # the API names the slowest samples too
        r["i"] for r in sorted(body["results"], key=lambda r: (-r["duration_ms"], r["i"]))]


def test_test_run_with_a_json_list_of_responses(api_for, engineer, project, reward_fn):
    resp = api_for(engineer).post(f"{base(project)}{reward_fn.pk}/test-run/", {
        "responses": [{"response": "7", "ground_truth": "7"}, {"response": "7", "ground_truth": "8"}]},
        format="json")
    assert resp.status_code == 202 and [r["score"] for r in resp.json()["results"]] == [1.0, 0.0]


@pytest.mark.parametrize("payload, field", [
    ({"dataset_version": 999999}, "dataset_version"),
    ({"version": 5, "responses": "x"}, "version"),
    ({"responses": "[1,"}, "responses"),
    ({}, "dataset_version"),
])
def test_test_run_bad_input_is_a_400_with_the_field(api_for, engineer, project, reward_fn, payload, field):
    resp = api_for(engineer).post(f"{base(project)}{reward_fn.pk}/test-run/", payload, format="json")
    assert resp.status_code == 400 and resp.json()["field"] == field and resp.json()["detail"]


def test_dataset_version_of_another_project_is_refused(api_for, engineer, project, reward_fn, django_user_model):
    from webapp.core.models import Project
    from webapp.datasets.models import Dataset, DatasetVersion

    other = Project.objects.create(slug="other", name="Other")
    dv = DatasetVersion.objects.create(dataset=Dataset.objects.create(project=other, name="d", kind="prompts"),
                                       number=1, status="ready")
    resp = api_for(engineer).post(f"{base(project)}{reward_fn.pk}/test-run/", {"dataset_version": dv.pk},
                                  format="json")
    assert resp.status_code == 400 and resp.json()["field"] == "dataset_version"


def test_a_test_run_says_how_many_samples_were_asked(api_for, engineer, project, reward_fn, arith):
    """Asking for more samples than the version has rows scores every row; the run keeps what was asked, so
    the page can say why there are fewer (rewards.js)."""
    body = api_for(engineer).post(f"{base(project)}{reward_fn.pk}/test-run/",
                                  {"version": 1, "dataset_version": arith.pk, "limit": 500}, format="json").json()
    assert body["limit"] == 500 and body["sample_count"] == arith.row_count < 500
