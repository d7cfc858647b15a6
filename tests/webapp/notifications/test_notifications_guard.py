"""What a hook may not do: reach a refused IPv4 address through an IPv6 form that wraps it, carry a line break in
an e-mail address, keep a failure that cannot pass in the retry loop, or let its signing secret out of the page
that shows it once (no cookie, session or redirect holds it)."""
from __future__ import annotations

import http.client
import smtplib
import socket

import pytest
from django.contrib.messages.storage.cookie import CookieStorage
from django.core import mail

from webapp.core.models import UserSession
from webapp.core.services import ApplicationError
from webapp.notifications import services, transport
from webapp.notifications.models import Delivery, Hook

pytestmark = pytest.mark.django_db

# IPv6 forms that wrap a loopback, private or link-local IPv4 address
WRAPPED = {
    "6to4 of 127.0.0.1": "http://[2002:7f00:1::]/",
    "6to4 of 10.0.0.5": "http://[2002:a00:5::1]/x",
    "6to4 of the metadata address": "http://[2002:a9fe:a9fe::]/latest/meta-data",
    "Teredo, client 127.0.0.1": "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/",
    "NAT64 of 127.0.0.1": "http://[64:ff9b::7f00:1]/",
    "NAT64 of 192.168.1.10": "http://[64:ff9b::c0a8:10a]/",
    "local-use NAT64": "http://[64:ff9b:1::7f00:1]/",
    "IPv4-compatible 127.0.0.1": "http://[::127.0.0.1]/",
    "IPv4-compatible 10.0.0.5": "http://[::a00:5]/",
    "IPv4-mapped 127.0.0.1": "http://[::ffff:127.0.0.1]/",
    "IPv4-mapped 172.16.0.1": "http://[::ffff:ac10:1]/",
}


@pytest.fixture
def no_connections(monkeypatch):
    """Any attempt to open a connection fails the test: refusals must come before connecting."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"a connection was attempted: {args!r}")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(http.client.HTTPConnection, "connect", refuse)


@pytest.mark.parametrize("url", WRAPPED.values(), ids=WRAPPED.keys())
def test_ipv6_forms_wrapping_a_refused_ipv4_address_are_refused_before_connecting(project, admin_user, url,
                                                                                  no_connections):
    with pytest.raises(ApplicationError) as err:
        services.hook_create(project=project, user=admin_user, name="wrapped", kind="json", url=url)
    assert err.value.field == "url" and not Hook.objects.exists()
    with pytest.raises(transport.UnsafeURL):  # a hook saved before the rule existed is refused when sent
        transport.post(url, b"{}", {})


def test_embedded_ipv4_addresses_are_read_from_each_form():
    import ipaddress

    def v4s(text):
        return [str(a) for a in transport.embedded_ipv4(ipaddress.IPv6Address(text))]

    assert v4s("2002:7f00:1::") == ["127.0.0.1"]
    assert v4s("2001:0:4136:e378:8000:63bf:80ff:fffe") == ["65.54.227.120", "127.0.0.1"]
    assert v4s("64:ff9b::808:808") == ["8.8.8.8"] and v4s("::a00:5") == ["10.0.0.5"]
    assert v4s("2606:4700::1111") == []
    # 6to4 of a public address wraps nothing the guard refuses (resolving a literal sends nothing)
    assert transport.resolve("http://[2002:808:808::1]/").address == "2002:808:808::1"


@pytest.mark.parametrize("emails", ["a@x.org\r\nBcc: evil@y.org", "a@x.org, b@x.org\nBcc: evil@y.org",
                                    "a@x.org\rX: y", "not an address", "a@x.org, b", " , "])
def test_email_hooks_refuse_line_breaks_and_non_addresses_in_every_way_in(project, admin_user, as_user, api_for,
                                                                         emails):
    with pytest.raises(ApplicationError) as err:
        services.hook_create(project=project, user=admin_user, name="team", kind="email", emails=emails)
    assert err.value.field == "emails"
    form = as_user(admin_user).post(f"/p/{project.slug}/notifications/",
                                    {"name": "team", "kind": "email", "emails": emails})
    assert form.status_code == 200 and 'id="id_emails-error"' in form.content.decode()
    api = api_for(admin_user).post(f"/api/projects/{project.slug}/hooks/",
                                   {"name": "team", "kind": "email", "emails": emails}, format="json")
    assert api.status_code == 400 and api.json()["field"] == "emails"
    assert not Hook.objects.exists()


def test_email_addresses_are_stored_cleaned(project, admin_user):
    hook = services.hook_create(project=project, user=admin_user, name="team", kind="email",
                                emails=" a@x.org ,b@x.org,")
    assert hook.emails == "a@x.org, b@x.org"


def test_a_delivery_that_cannot_succeed_fails_at_once_without_retries(project, admin_user, settings, monkeypatch):
    from jobs.tasks import deliver_notification

    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    # saved before addresses were checked: the mail library refuses the header (BadHeaderError)
    hook = Hook.objects.create(project=project, name="old", kind="email", emails="a@x.org\r\nBcc: evil@y.org")
    [d] = services.notify(project, "job.failed", message="boom")
    retries = []
    monkeypatch.setattr(deliver_notification, "retry", lambda *a, **kw: retries.append(kw))
    assert deliver_notification.apply(args=[d.pk]).get() == "failed"
    d.refresh_from_db()
    assert (d.status, d.attempts, retries) == ("failed", 1, []) and "newline" in d.error and mail.outbox == []

    def refuse_all(*args, **kwargs):  # an SMTP server that answers 550 for every recipient
        raise smtplib.SMTPRecipientsRefused({"a@x.org": (550, b"no such user")})

    hook.emails = "a@x.org"
    hook.save()
    monkeypatch.setattr("django.core.mail.backends.locmem.EmailBackend.send_messages", refuse_all)
    [d] = services.notify(project, "job.failed")
    assert services.deliver(d.pk) == "failed"

    def busy(*args, **kwargs):  # 451: try again later
        raise smtplib.SMTPSenderRefused(451, b"try later", "workbench@localhost")

    monkeypatch.setattr("django.core.mail.backends.locmem.EmailBackend.send_messages", busy)
    [d] = services.notify(project, "job.failed")
    assert services.deliver(d.pk) == "retry" and Delivery.objects.get(pk=d.pk).status == "pending"


def test_the_signing_secret_is_in_the_page_only_never_in_a_cookie_session_or_redirect(project, admin_user,
                                                                                      as_user, settings, rf):
    settings.NOTIFY_ALLOW_PRIVATE_HOSTS = True
    admin = as_user(admin_user)
    url = f"/p/{project.slug}/notifications/"
    resp = admin.post(url, {"name": "ci", "kind": "json", "url": "http://127.0.0.1:9/h"})
    secret = Hook.objects.get().secret
    assert resp.status_code == 200 and secret in resp.content.decode()  # no redirect: the answer shows it
    for morsel in resp.cookies.values():
        assert secret not in morsel.value
        if morsel.key == "messages" and morsel.value:
            decoded = CookieStorage(rf.get("/"))._decode(morsel.value) or []
            assert all(secret not in str(m) for m in decoded)
    for session in UserSession.objects.all():
        assert secret not in str(session.get_decoded())
    after = admin.get(url).content.decode()
    assert secret not in after and "ci" in after
