"""Bringing someone in: an invitation's link creates the account (or asks its owner to sign in) and joins; a
name that can never be an account is refused; the app's own error pages, with the navigation, for 403, 404 and
500 (and the invitation itself for an invited user who follows a link into the project); a 403 is one log line."""
from __future__ import annotations

import logging
import re

import pytest
from django.contrib.auth import get_user_model

from webapp.core.models import AuditLog, Invitation, Membership, Role

pytestmark = pytest.mark.django_db
NEW_PASSWORD = "a-long-new-password"


def invite(client, username: str, role: str = "reviewer") -> str:
    """Invite through the members page; return the link it shows (once)."""
    resp = client.post("/p/acme/members/", {"username": username, "role": role})
    assert resp.status_code == 200, resp.content[:300]
    return re.search(r'id="join-link"[^>]*value="http://testserver(/join/[\w-]+/)"', resp.content.decode())[1]


def test_an_invitation_link_creates_the_account_and_joins(client, as_user, admin_user):
    link = invite(as_user(admin_user), "newbie")
    page = client.get(link)  # not signed in: the link is open
    assert page.status_code == 200 and "Create your account" in page.content.decode()
    assert 'class="topbar"' in page.content.decode()  # the app's page, styled
    differ = client.post(link, {"password1": NEW_PASSWORD, "password2": NEW_PASSWORD + "x"})
    assert differ.status_code == 200 and "The two passwords differ" in differ.content.decode()
    short = client.post(link, {"password1": "short", "password2": "short"})
    assert short.status_code == 200 and "too short" in short.content.decode()
    assert not get_user_model().objects.filter(username="newbie").exists()
    done = client.post(link, {"password1": NEW_PASSWORD, "password2": NEW_PASSWORD})
    assert done.status_code == 302 and done["Location"] == "/p/acme/"
    newbie = get_user_model().objects.get(username="newbie")
    assert newbie.check_password(NEW_PASSWORD) and Membership.objects.get(user=newbie).role == Role.REVIEWER
    assert client.get("/p/acme/").status_code == 200  # signed in as the new account
    assert AuditLog.objects.filter(action="account.create", actor=newbie).exists()
    assert not Invitation.objects.exists()
    dead = client.get(link)  # used: a styled page that says so
    assert dead.status_code == 404 and "not valid any more" in dead.content.decode()


def test_an_invitation_link_for_an_existing_account_asks_its_owner_to_sign_in(client, as_user, admin_user,
                                                                                 viewer, django_user_model):
    rob = django_user_model.objects.create_user(username="rob", password="pw-for-tests-1")
    link = invite(as_user(admin_user), "rob")
    page = client.get(link).content.decode()
    assert "Sign in as rob" in page and f"/login/?next={link}" in page
    assert "Create your account" not in page
    client.post(link, {"password1": NEW_PASSWORD, "password2": NEW_PASSWORD})  # cannot take over rob
    rob.refresh_from_db()
    assert not rob.check_password(NEW_PASSWORD) and not Membership.objects.filter(user=rob).exists()
    other = as_user(viewer).get(link).content.decode()
    assert "this invitation is for rob" in other and "Accept" not in other
    mine = as_user(rob).get(link).content.decode()
    assert "Accept and join" in mine


def test_a_new_link_replaces_the_old_one(client, as_user, admin_user):
    admin = as_user(admin_user)
    old = invite(admin, "newbie")
    resp = admin.post(f"/p/acme/invitations/{Invitation.objects.get().pk}/link/")
    new = re.search(r'value="http://testserver(/join/[\w-]+/)"', resp.content.decode())[1]
    assert new != old and client.get(old).status_code == 404 and client.get(new).status_code == 200


def test_staff_are_told_whether_the_account_exists_and_names_no_account_can_have_are_refused(
        as_user, admin_user, django_user_model):
    admin_user.is_staff = True
    admin_user.save()
    admin = as_user(admin_user)
    assert "There is no account named ghost yet" in admin.post(
        "/p/acme/members/", {"username": "ghost", "role": "viewer"}).content.decode()
    django_user_model.objects.create_user(username="real", password="x")
    assert "An account named real exists" in admin.post(
        "/p/acme/members/", {"username": "real", "role": "viewer"}).content.decode()
    for bad in ("new bie", "a/b", "x" * 151):
        resp = admin.post("/p/acme/members/", {"username": bad, "role": "viewer"})
        assert resp.status_code == 200 and 'id="id_username-error"' in resp.content.decode()
    assert sorted(Invitation.objects.values_list("username", flat=True)) == ["ghost", "real"]


def test_the_api_gives_the_link_too(api_for, admin_user, client):
    resp = api_for(admin_user).post("/api/projects/acme/members/", {"username": "newbie", "role": "viewer"},
                                    format="json")
    assert resp.status_code == 202
    assert client.get(resp.json()["join_url"].removeprefix("http://testserver")).status_code == 200


def test_an_invited_user_following_a_project_link_sees_the_invitation(as_user, admin_user, django_user_model):
    rob = django_user_model.objects.create_user(username="rob", password="x")
    invite(as_user(admin_user), "rob")
    page = as_user(rob).get("/p/acme/datasets/")
    body = page.content.decode()
    assert page.status_code == 404 and "You are invited to Acme RLHF" in body and "Accept and join" in body
    stranger = django_user_model.objects.create_user(username="sid", password="x")
    body = as_user(stranger).get("/p/acme/datasets/").content.decode()
    assert "Page not found" in body and "Accept" not in body and "Acme RLHF" not in body


def test_error_pages_are_the_apps_with_navigation_and_no_settings(as_user, admin_user, viewer, client,
                                                                   monkeypatch):
    c = as_user(viewer)
    forbidden = c.get("/p/acme/settings/")
    body = forbidden.content.decode()
    assert forbidden.status_code == 403 and "Not allowed" in body and "needs the admin role" in body
    assert 'class="mainnav"' in body and "/p/acme/datasets/" in body  # the project's navigation
    missing = c.get("/p/acme/no-such-page/")
    assert missing.status_code == 404 and 'class="topbar"' in missing.content.decode()
    assert "Page not found" in missing.content.decode()
    anonymous = client.get("/static/nothing-here.css")
    assert anonymous.status_code == 404
    assert c.get("/api/projects/acme/nothing/").json() == {"detail": "Page not found"}

    def boom(**kwargs):
        raise RuntimeError("SECRET_KEY=do-not-show")

    monkeypatch.setattr("webapp.core.services.project_update_settings", boom)
    admin = as_user(admin_user)
    admin.raise_request_exception = False
    crashed = admin.post("/p/acme/settings/", {"review_overlap": 2})
    body = crashed.content.decode()
    assert crashed.status_code == 500 and "Something went wrong" in body and 'class="topbar"' in body
    assert "do-not-show" not in body and "SECRET_KEY" not in body and "Traceback" not in body


def test_a_403_is_one_line_in_the_log(as_user, viewer, caplog):
    with caplog.at_level(logging.WARNING, logger="django.request"):
        assert as_user(viewer).get("/p/acme/settings/").status_code == 403
    [record] = [r for r in caplog.records if r.name == "django.request"]
    assert record.exc_info is None and "\n" not in record.getMessage()
    assert record.getMessage() == ("Forbidden (Permission denied): /p/acme/settings/ "
                                   "(This needs the admin role in Acme RLHF.)")
