"""Role checks on hooks (admins) and health rules (engineers edit, viewers read), through the API and the CLI."""
from __future__ import annotations

import json

import pytest

from webapp.notifications.models import Delivery, Hook

pytestmark = pytest.mark.django_db


def test_only_admins_manage_hooks_and_secrets_are_shown_once(project, admin_user, engineer, api_for, settings):
    settings.NOTIFY_ALLOW_PRIVATE_HOSTS = True
    base = f"/api/projects/{project.slug}/hooks/"
    assert api_for(engineer).get(base).status_code == 403
    assert api_for(engineer).post(base, {"name": "x", "kind": "slack", "url": "http://127.0.0.1:9/x"},
                                  format="json").status_code == 403
    r = api_for(admin_user).post(base, {"name": "ci", "kind": "json", "url": "http://127.0.0.1:9/h?token=abc",
                                        "events": ["job.failed"]}, format="json")
    assert r.status_code == 201 and len(r.json()["secret"]) == 64 and "token" not in r.json()["url"]
    listed = api_for(admin_user).get(base).json()["hooks"]
    assert listed[0]["name"] == "ci" and "secret" not in listed[0] and "abc" not in json.dumps(listed)
    settings.NOTIFY_ALLOW_PRIVATE_HOSTS = False
    r = api_for(admin_user).post(base, {"name": "meta", "kind": "json", "url": "http://169.254.169.254/"},
                                 format="json")
    assert r.status_code == 400 and r.json()["field"] == "url"
    bad = api_for(admin_user).post(base, {"name": "x", "kind": "json", "url": "http://a.org", "events": ["nope"]},
                                   format="json")
    assert bad.status_code == 400
    hook = Hook.objects.get(name="ci")
    d = Delivery.objects.create(hook=hook, event="job.failed", payload={"title": "t"}, status="failed", attempts=5)
    assert api_for(engineer).post(f"{base}deliveries/{d.pk}/resend/").status_code == 403
    r = api_for(admin_user).post(f"{base}deliveries/{d.pk}/resend/")
    assert r.status_code == 202 and r.json()["status"] == "pending" and Delivery.objects.count() == 2
    log = api_for(admin_user).get(f"{base}deliveries/").json()["deliveries"]
    assert {(x["status"], x["attempts"]) for x in log} == {("failed", 5), ("pending", 0)}
    assert api_for(admin_user).delete(f"{base}{hook.pk}/").status_code == 204 and not Hook.objects.exists()

