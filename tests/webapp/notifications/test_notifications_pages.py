"""The notifications page: admins add hooks (URL shown as its host only), see the delivery log and re-send."""
from __future__ import annotations

import pytest

from webapp.notifications.models import Delivery, Hook

pytestmark = pytest.mark.django_db


def test_admin_adds_a_hook_sees_the_log_and_resends(project, admin_user, engineer, as_user, settings,
                                                    django_capture_on_commit_callbacks, monkeypatch):
    sent = []
    monkeypatch.setattr("webapp.core.queue.enqueue", lambda task, *args, **kw: sent.append(args))
    settings.NOTIFY_ALLOW_PRIVATE_HOSTS = True
    url = f"/p/{project.slug}/notifications/"
    assert as_user(engineer).get(url).status_code == 403
    admin = as_user(admin_user)
    r = admin.post(url, {"name": "ci", "kind": "json", "url": "http://127.0.0.1:9/h?token=abc",
                         "events": ["job.failed"]}, follow=True)
    page = r.content.decode()
    hook = Hook.objects.get()
    assert "Hook ci added" in page and hook.secret in page  # the signing secret, once
    assert "token=abc" not in page and "http://127.0.0.1:9/…" in page
    page = admin.get(url).content.decode()
    assert hook.secret not in page
    settings.NOTIFY_ALLOW_PRIVATE_HOSTS = False
    r = admin.post(url, {"name": "meta", "kind": "slack", "url": "http://169.254.169.254/x"})
    assert r.status_code == 200 and "link-local" in r.content.decode() and Hook.objects.count() == 1
    d = Delivery.objects.create(hook=hook, event="job.failed", payload={}, status="failed", response_code=500,
                                attempts=5, error="HTTP 500")
    page = admin.get(url).content.decode()
    assert 'id="deliveries"' in page and "HTTP 500" in page
    with django_capture_on_commit_callbacks(execute=True):
        r = admin.post(f"{url}deliveries/{d.pk}/resend/", follow=True)
    assert "re-sent" in r.content.decode() and Delivery.objects.count() == 2 and len(sent) == 1
    assert as_user(engineer).post(f"{url}deliveries/{d.pk}/resend/").status_code == 403
    admin.post(f"{url}hooks/{hook.pk}/delete/")
    assert not Hook.objects.exists()
