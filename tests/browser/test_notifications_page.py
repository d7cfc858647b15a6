"""The notifications page in a browser: an admin adds a signed JSON hook pointing at a loopback receiver, sees
its secret once (in the page only: no cookie holds it, and reloading neither posts again nor shows it) and its URL
only as its host, sends a test and re-sends it; the receiver gets both, signed."""
from __future__ import annotations

import hmac
import re
import threading
from hashlib import sha256
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.contrib.messages.storage.cookie import CookieStorage
from django.test import RequestFactory

from tests.browser.browser_helpers import PASSWORD
from tests.browser_support import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


class _Receiver(BaseHTTPRequestHandler):
    got: list[tuple[str, dict, bytes]] = []

    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.got.append((self.path, dict(self.headers), body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def receiver():
    _Receiver.got = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_admin_adds_a_hook_tests_it_and_resends(page, live_server, project, admin_user, receiver, settings,
                                                monkeypatch):
    from webapp.notifications import services
    from webapp.notifications.models import Hook

    queued: list[int] = []  # the worker's part: the test delivers what the page queued
    monkeypatch.setattr("webapp.core.queue.enqueue", lambda task, *args, **kw: queued.extend(args))
    settings.NOTIFY_ALLOW_PRIVATE_HOSTS = True  # the receiver is on loopback
    admin_user.set_password(PASSWORD)
    admin_user.save()
    port = receiver.server_address[1]
    login(page, live_server, admin_user.username, PASSWORD)
    page.goto(f"{live_server.url}/p/{project.slug}/notifications/")
    page.get_by_label("Name").fill("ci")
    page.get_by_label("Kind").select_option("json")
    page.get_by_label("URL").fill(f"http://127.0.0.1:{port}/hook?token=s3cret")
    set_cookies: list[str] = []
    page.on("response", lambda r: set_cookies.extend(h["value"] for h in r.headers_array()
                                                      if h["name"].lower() == "set-cookie"))
    page.get_by_role("button", name="Add hook").click()
    page.wait_for_selector("text=Hook ci added")
    hook = Hook.objects.get(project=project)
    assert hook.secret and hook.secret in page.content()  # shown once, right after adding
    row = page.locator("tr", has_text="ci")
    assert row.locator("code").inner_text() == f"http://127.0.0.1:{port}/…"
    assert "s3cret" not in page.content()
    # in the page only: no response set a cookie holding it, not even inside a signed message
    for header in set_cookies:
        value = header.split(";")[0].partition("=")[2].strip('"')
        messages = CookieStorage(RequestFactory().get("/"))._decode(value) or []
        assert hook.secret not in header and all(hook.secret not in str(m) for m in messages)
    page.reload()  # a plain GET: the form is not posted again, and the secret is gone
    page.wait_for_selector("#hook-added", state="detached")
    assert hook.secret not in page.content() and Hook.objects.filter(project=project).count() == 1

    page.get_by_role("button", name="Send a test").click()
    page.wait_for_selector("text=A test message to ci is on its way")
    assert len(queued) == 1 and services.deliver(queued[0]) == "sent"
    page.reload()
    log = page.locator("#deliveries tbody tr")
    assert log.count() == 1 and re.search(r"test\s+ci\s+sent\s+200", log.first.inner_text())
    log.first.get_by_role("button", name="Re-send").click()
    page.wait_for_selector("text=test to ci re-sent")
    assert len(queued) == 2 and services.deliver(queued[1]) == "sent"
    page.reload()
    assert page.locator("#deliveries tbody tr").count() == 2

    assert [path for path, _, _ in _Receiver.got] == ["/hook?token=s3cret"] * 2  # the full URL is used
    for _, headers, body in _Receiver.got:
        expected = hmac.new(hook.secret.encode(), f"{headers['X-Workbench-Timestamp']}.".encode() + body,
                            sha256).hexdigest()
        assert headers["X-Workbench-Signature"] == f"sha256={expected}" and headers["X-Workbench-Event"] == "test"
