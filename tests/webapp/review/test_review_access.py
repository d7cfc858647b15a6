"""Access rules per role on every review page and endpoint (outsider 404, low role 403)."""
from __future__ import annotations

import pytest

from webapp.datasets.models import DatasetRow
from webapp.review import services

pytestmark = pytest.mark.django_db

ROLES = ["outsider", "viewer", "reviewer", "engineer", "admin_user"]


def _codes(**by_role):
    return [by_role[r] for r in ROLES]


@pytest.fixture
def ctx(project, version, reviewer2):
    services.ensure_pair_states(version=version)
    row = DatasetRow.objects.get(version=version, index=0)
    # A conflict to resolve, made by two other reviewers.
    project.review_overlap = 2
    project.save()
    services.review_submit(actor=reviewer2, project=project, row=row, choice="approve")
    return {"v": version.pk, "row": row.pk, "reviewer2": reviewer2.pk}


PAGES = [
    # (method, url, outsider, viewer, reviewer, engineer, admin)
    ("get", "/p/acme/review/", 404, 200, 200, 200, 200),
    ("get", "/p/acme/review/v/{v}/", 404, 403, 200, 200, 200),
    ("get", "/p/acme/review/v/{v}/pairs/", 404, 403, 403, 200, 200),
    ("post", "/p/acme/review/v/{v}/pairs/", 404, 403, 403, 302, 302),
    ("get", "/p/acme/review/v/{v}/stats/", 404, 200, 200, 200, 200),
    ("get", "/p/acme/review/v/{v}/conflicts/", 404, 403, 403, 200, 200),
    ("get", "/p/acme/review/v/{v}/items/{row}/", 404, 403, 403, 200, 200),
    ("post", "/p/acme/review/v/{v}/items/{row}/", 404, 403, 403, 403, 302),
    ("post", "/p/acme/review/v/{v}/release/", 404, 403, 403, 403, 302),
]

API = "/api/projects/acme/review/versions/"
ENDPOINTS = [
    ("get", API, None, 404, 200, 200, 200, 200),
    ("get", API + "{v}/next/", None, 404, 403, 200, 200, 200),
    ("get", API + "{v}/prev/?before=5", None, 404, 403, 200, 200, 200),
    ("get", API + "{v}/items/{row}/", None, 404, 200, 200, 200, 200),
    ("post", API + "{v}/items/{row}/review/", {"choice": "reject"}, 404, 403, 201, 201, 201),
    ("post", API + "{v}/items/{row}/edit/", {"side": "chosen", "text": "new text"}, 404, 403, 201, 201, 201),
    ("post", API + "{v}/items/{row}/comments/", {"text": "hm"}, 404, 403, 201, 201, 201),
    ("post", API + "{v}/items/{row}/resolve/", {"label": "reject"}, 404, 403, 403, 403, 200),
    ("get", API + "{v}/stats/", None, 404, 200, 200, 200, 200),
    ("get", API + "{v}/conflicts/", None, 404, 403, 403, 200, 200),
    ("post", API + "{v}/bulk/", {"action": "approve", "row_ids": ["{row}"]}, 404, 403, 403, 200, 200),
]


def _data(method, url, ctx):
    url = url.format(**ctx)
    if method == "post" and "pairs" in url:
        return url, {"action": "approve", "scope": "selected", "rows": [ctx["row"]]}
    if method == "post" and url.endswith(f"items/{ctx['row']}/"):
        return url, {"label": "reject"}
    if method == "post" and "release" in url:
        return url, {"reviewer": ctx["reviewer2"]}
    return url, {}


@pytest.mark.parametrize("role_index,role", list(enumerate(ROLES)))
@pytest.mark.parametrize("page", PAGES, ids=[f"{p[0]} {p[1]}" for p in PAGES])
def test_pages(request, as_user, ctx, page, role_index, role):
    user = request.getfixturevalue(role)
    method, url, *codes = page
    url, data = _data(method, url, ctx)
    client = as_user(user)
    resp = client.post(url, data) if method == "post" else client.get(url)
    assert resp.status_code == codes[role_index], (role, url, resp.content[:300])


@pytest.mark.parametrize("role_index,role", list(enumerate(ROLES)))
@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=[f"{e[0]} {e[1]}" for e in ENDPOINTS])
def test_endpoints(request, api_for, ctx, endpoint, role_index, role):
    user = request.getfixturevalue(role)
    method, url, body, *codes = endpoint
    url = url.format(**ctx)
    if body and "row_ids" in body:
        body = {**body, "row_ids": [ctx["row"]]}
    client = api_for(user)
    resp = client.post(url, body, format="json") if method == "post" else client.get(url)
    assert resp.status_code == codes[role_index], (role, url, resp.content[:300])


def test_anonymous_is_refused(client, ctx):
    assert client.get("/p/acme/review/").status_code == 302
    assert client.get(API + f"{ctx['v']}/next/").status_code in (401, 403)


def test_a_version_of_another_project_is_404(as_user, api_for, admin_user, project, make, ctx):
    from webapp.core.models import Project

    other = Project.objects.create(slug="other", name="Other")
    foreign = make(other, name="theirs")
    assert as_user(admin_user).get(f"/p/acme/review/v/{foreign.pk}/").status_code == 404
    assert api_for(admin_user).get(API + f"{foreign.pk}/next/").status_code == 404
    prompts = make(project, name="arith", kind="prompts")
    assert api_for(admin_user).get(API + f"{prompts.pk}/next/").status_code == 404


def test_the_role_is_judged_before_the_version_is_looked_up(api_for, ctx, request):
    """A missing version answers as the project does for the caller: 404 to an outsider, 403 to a role too low."""
    missing = API + f"{ctx['v'] + 10_000}/next/"
    outsider, viewer, reviewer = (request.getfixturevalue(r) for r in ROLES[:3])
    assert api_for(outsider).get(missing).status_code == 404
    assert api_for(viewer).get(missing).status_code == 403
    assert api_for(reviewer).get(missing).status_code == 404
