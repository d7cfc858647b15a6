"""Sessions carry their user (webapp.core.sessions): one query reads both, and Django's checks still hold."""
from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from tests.conftest import PASSWORD
from webapp.core.models import UserSession

pytestmark = pytest.mark.django_db


def _signed_in(viewer) -> Client:
    client = Client()
    assert client.post("/login/", {"username": viewer.username, "password": PASSWORD}).status_code == 302
    return client


def _whoami(client) -> tuple[str | None, int]:
    """The signed-in user as the request saw it, and the queries it took to know."""
    from django.contrib.auth import get_user
    from django.test import RequestFactory

    request = RequestFactory().get("/")
    request.session = UserSession.get_session_store_class()(client.cookies["sessionid"].value)
    with CaptureQueriesContext(connection) as queries:
        user = get_user(request)
    return (user.username if user.is_authenticated else None), len(queries)


def test_a_signed_in_request_reads_its_session_and_user_in_one_query(viewer):
    client = _signed_in(viewer)
    session = UserSession.objects.get()
    assert session.user_id == viewer.pk and session.get_decoded()["_auth_user_id"] == str(viewer.pk)
    assert _whoami(client) == (viewer.username, 1)
    assert client.get("/").status_code == 200


def test_a_changed_password_or_a_deactivated_account_ends_the_session(viewer):
    client = _signed_in(viewer)
    viewer.set_password("another-long-password")
    viewer.save()
    assert _whoami(client)[0] is None  # the session's password hash no longer matches
    viewer.set_password(PASSWORD)
    viewer.save()
    client = _signed_in(viewer)
    viewer.is_active = False
    viewer.save()
    assert _whoami(client)[0] is None


def test_signing_out_or_deleting_the_user_removes_the_session(viewer, engineer):
    client = _signed_in(viewer)
    _signed_in(engineer)
    client.post("/logout/")
    assert list(UserSession.objects.values_list("user_id", flat=True)) == [engineer.pk]
    engineer.delete()
    assert not UserSession.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_upgrade_keeps_whoever_was_signed_in_signed_in(viewer):
    """core 0006 copies Django's unexpired sessions, with their user, into the new table."""
    from django.contrib.auth import login
    from django.contrib.sessions.backends.db import SessionStore as DjangoStore
    from django.test import RequestFactory

    from tests.migration_support import migrate_app_to

    migrate_app_to(("core", "0005_user_sessions"))
    try:
        request = RequestFactory().get("/")
        request.session = DjangoStore()  # the engine before the upgrade
        login(request, viewer, backend="webapp.core.throttling.ThrottledModelBackend")
        request.session.save()
        anonymous = DjangoStore()
        anonymous["seen"] = 1
        anonymous.save()
    finally:
        migrate_app_to(None)
    kept = dict(UserSession.objects.values_list("session_key", "user_id"))
    assert kept == {request.session.session_key: viewer.pk, anonymous.session_key: None}
    client = Client()
    client.cookies["sessionid"] = request.session.session_key
    assert _whoami(client) == (viewer.username, 1)
