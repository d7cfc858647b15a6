"""Notifications: a real HTTP receiver on 127.0.0.1 checks the HMAC signature; unsafe URLs are refused
before any connection; deliveries are logged, retried with backoff, and re-sent."""
from __future__ import annotations

import hashlib
import hmac
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core import mail

from webapp.core.services import ApplicationError
from webapp.notifications import services, transport
from webapp.notifications.models import Delivery, Hook

pytestmark = pytest.mark.django_db


@pytest.fixture
def receiver():
    """An HTTP server on 127.0.0.1 recording each POST; `status` sets the answer (a list is consumed)."""
    got: list[dict] = []
    state = {"status": [200]}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            got.append({"path": self.path, "headers": dict(self.headers), "body": body})
            status = state["status"].pop(0) if len(state["status"]) > 1 else state["status"][0]
            if status == 302:
                self.send_response(302)
                self.send_header("Location", state["location"])
                self.end_headers()
                return
            self.send_response(status)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield {"url": f"http://127.0.0.1:{server.server_port}", "got": got, "state": state}
    server.shutdown()
    server.server_close()


@pytest.fixture
def allow_local(settings):
    settings.NOTIFY_ALLOW_PRIVATE_HOSTS = True
    return settings


def test_a_json_hook_delivers_a_signed_payload_to_a_real_receiver(project, admin_user, allow_local, receiver,
                                                                  django_capture_on_commit_callbacks, monkeypatch):
    sent = []
    monkeypatch.setattr("webapp.core.queue.enqueue", lambda task, *args, **kw: sent.append((task, args)))
    hook = services.hook_create(project=project, user=admin_user, name="ci", kind="json",
                                url=receiver["url"] + "/hook?token=s3cret", events=["job.stalled"])
    with django_capture_on_commit_callbacks(execute=True):
        deliveries = services.notify(project, "job.stalled", message="Stalled: no new step for 12 min")
        assert services.notify(project, "job.finished") == []  # the hook does not want it
    assert sent == [("jobs.tasks.deliver_notification", (deliveries[0].pk,))]
    assert services.deliver(deliveries[0].pk) == "sent"
    [req] = receiver["got"]
    assert req["path"] == "/hook?token=s3cret"
    ts, signature = req["headers"]["X-Workbench-Timestamp"], req["headers"]["X-Workbench-Signature"]
    expected = "sha256=" + hmac.new(hook.secret.encode(), ts.encode() + b"." + req["body"], hashlib.sha256).hexdigest()
    assert hmac.compare_digest(signature, expected)
    body = json.loads(req["body"])
    assert body["event"] == "job.stalled" and body["message"].startswith("Stalled") and body["project"] == project.slug
    d = Delivery.objects.get(pk=deliveries[0].pk)
    assert (d.status, d.response_code, d.attempts) == ("sent", 200, 1)
    # the secret and the URL's path never come back
    shown = services.hook_json(hook)
    assert "s3cret" not in json.dumps(shown) and hook.secret not in json.dumps(shown)
    assert shown["url"].startswith("http://127.0.0.1:")


def test_slack_payload_and_retry_then_success_then_resend(project, admin_user, allow_local, receiver):
    hook = services.hook_create(project=project, user=admin_user, name="slack", kind="slack", url=receiver["url"])
    receiver["state"]["status"] = [503, 200]
    [d] = services.notify(project, "guard.tripped", message="kl: actor/kl_loss above 0.1")
    assert services.deliver(d.pk) == "retry"
    d.refresh_from_db()
    assert (d.status, d.response_code, d.attempts, d.error) == ("pending", 503, 1, "HTTP 503")
    assert services.deliver(d.pk) == "sent"
    text = json.loads(receiver["got"][-1]["body"])["text"]
    assert text.startswith("*Health rule tripped*") and "kl: actor/kl_loss above 0.1" in text
    assert services.backoff_s(1) == 10 and services.backoff_s(3) == 40 and services.backoff_s(20) == 600
    again = services.delivery_resend(delivery=d, user=admin_user)
    assert again.pk != d.pk and again.payload == d.payload and again.hook == hook
    receiver["state"]["status"] = [404]
    assert services.deliver(again.pk) == "failed"  # a 4xx is final


def test_email_hook_goes_through_djangos_mail_backend(project, admin_user, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    services.hook_create(project=project, user=admin_user, name="team", kind="email", emails="a@x.org, b@x.org")
    [d] = services.notify(project, "job.failed", message="Run failed: out of memory")
    assert services.deliver(d.pk) == "sent"
    [m] = mail.outbox
    assert m.to == ["a@x.org", "b@x.org"] and "Run failed" in m.subject and "out of memory" in m.body


@pytest.mark.parametrize("url", ["http://127.0.0.1:6379/", "http://localhost/x", "http://10.0.0.5/h",
                                 "http://169.254.169.254/latest/meta-data", "http://[::1]/", "http://0.0.0.0/",
                                 "http://192.168.1.10/", "http://100.64.0.1/", "ftp://example.org/",
                                 "http://user:pw@example.org/"])
def test_hooks_to_loopback_private_or_link_local_addresses_are_refused(project, admin_user, url):
    with pytest.raises(ApplicationError) as err:
        services.hook_create(project=project, user=admin_user, name="bad", kind="json", url=url)
    assert err.value.field == "url"
    assert not Hook.objects.exists()


def test_refused_before_connecting_also_after_a_redirect(project, admin_user, settings, receiver, monkeypatch):
    # a hook created while private hosts were allowed, sent after the setting is off: refused, nothing sent
    settings.NOTIFY_ALLOW_PRIVATE_HOSTS = True
    hook = services.hook_create(project=project, user=admin_user, name="h", kind="json", url=receiver["url"])
    settings.NOTIFY_ALLOW_PRIVATE_HOSTS = False
    [d] = services.notify(project, "job.finished")
    assert services.deliver(d.pk) == "failed" and receiver["got"] == []
    d.refresh_from_db()
    assert d.status == "failed" and "private" in d.error
    # a public-looking name that resolves to loopback is refused too, before any connection
    monkeypatch.setattr(transport.socket, "getaddrinfo",
                        lambda host, port, **kw: [(2, 1, 6, "", ("127.0.0.1", port))])
    with pytest.raises(transport.UnsafeURL):
        transport.resolve("https://hooks.example.com/x")
    monkeypatch.undo()
    # a redirect to the cloud metadata address is checked like the first URL and refused
    settings.NOTIFY_ALLOW_PRIVATE_HOSTS = True
    receiver["state"].update(status=[302], location="http://169.254.169.254/latest/meta-data")
    real_resolve = transport.resolve

    def only_first_allowed(url, *, allow_private=False):
        return real_resolve(url, allow_private=url.startswith(receiver["url"]))

    monkeypatch.setattr(transport, "resolve", only_first_allowed)
    with pytest.raises(transport.UnsafeURL):
        transport.post(hook.url, b"{}", {})
    assert len(receiver["got"]) == 1  # the receiver got the first POST, the redirect target nothing



def test_the_worker_task_retries_a_failed_delivery_until_it_goes_through(project, admin_user, allow_local,
                                                                         receiver, monkeypatch):
    from jobs.tasks import deliver_notification

    waits = []
    real_retry = deliver_notification.retry

    def retry(*args, countdown=None, **kw):
        waits.append(countdown)
        return real_retry(*args, countdown=countdown, **kw)

    monkeypatch.setattr(deliver_notification, "retry", retry)
    services.hook_create(project=project, user=admin_user, name="ci", kind="json", url=receiver["url"])
    receiver["state"]["status"] = [502, 503, 200]
    [d] = services.notify(project, "job.lost", message="Run lost: no heartbeat")
    result = deliver_notification.apply(args=[d.pk])  # eager: each retry runs at once, its countdown is recorded
    assert result.get() == "sent" and waits == [10.0, 20.0]
    d.refresh_from_db()
    assert (d.status, d.attempts, d.response_code) == ("sent", 3, 200) and len(receiver["got"]) == 3
