"""The JSON API: token auth, object-level access, OpenAPI schema."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db


def test_api_requires_authentication(project):
    assert APIClient().get("/api/projects/").status_code in (401, 403)


def test_token_lists_only_visible_projects(api_for, outsider, admin_user):
    assert api_for(outsider).get("/api/projects/").json() == []
    slugs = [p["slug"] for p in api_for(admin_user).get("/api/projects/").json()]
    assert slugs == ["acme"]


def test_outsider_gets_404_on_project_api(api_for, outsider):
    assert api_for(outsider).get("/api/projects/acme/").status_code == 404
    assert api_for(outsider).get("/api/projects/acme/members/").status_code == 404


def test_viewer_cannot_add_members_admin_can(api_for, viewer, admin_user, django_user_model):
    django_user_model.objects.create_user(username="newbie", password="x")
    body = {"username": "newbie", "role": "reviewer"}
    assert api_for(viewer).post("/api/projects/acme/members/", body, format="json").status_code == 403
    resp = api_for(admin_user).post("/api/projects/acme/members/", body, format="json")
    assert resp.status_code == 202 and resp.json()["invitation"]["role"] == "reviewer"
    ghost = api_for(admin_user).post("/api/projects/acme/members/", {"username": "ghost", "role": "reviewer"},
                                     format="json")
    assert ghost.status_code == 202 and ghost.json()["detail"] == resp.json()["detail"].replace("newbie", "ghost")
    newbie = django_user_model.objects.get(username="newbie")
    [inv] = api_for(newbie).get("/api/invitations/").json()
    assert inv["project"] == "acme" and inv["role"] == "reviewer"
    assert api_for(viewer).post(f"/api/invitations/{inv['id']}/accept/").status_code == 404
    joined = api_for(newbie).post(f"/api/invitations/{inv['id']}/accept/")
    assert joined.status_code == 200 and joined.json()["role"] == "reviewer"
    changed = api_for(admin_user).post("/api/projects/acme/members/", {"username": "newbie", "role": "engineer"},
                                       format="json")
    assert changed.status_code == 200 and changed.json()["role"] == "engineer"


def test_create_project_via_api(api_for, outsider, settings):
    assert api_for(outsider).post("/api/projects/", {"name": "Via API"}, format="json").status_code == 403
    settings.PROJECT_CREATORS = "everyone"
    resp = api_for(outsider).post("/api/projects/", {"name": "Via API"}, format="json")
    assert resp.status_code == 201 and resp.json()["slug"] == "via-api"
    assert api_for(outsider).post("/api/projects/", {"name": "Via API"}, format="json").status_code == 400


def test_openapi_schema_is_served(api_for, viewer):
    resp = api_for(viewer).get("/api/schema/")
    assert resp.status_code == 200
    assert b"/api/projects/" in resp.content


def test_schema_and_docs_need_login(client, as_user, viewer):
    assert client.get("/api/schema/").status_code in (401, 403)
    docs = client.get("/api/docs/")
    assert docs.status_code == 302 and docs["Location"].startswith("/login/")
    member = as_user(viewer)
    assert member.get("/api/schema/").status_code == 200
    assert member.get("/api/docs/").status_code == 200
