"""Sign-in lockout per username and address, and API rate limits."""
from __future__ import annotations

import pytest
from django.test import Client

from tests.conftest import PASSWORD


def _login(client, username, password, ip="10.0.0.1", path="/login/"):
    return client.post(path, {"username": username, "password": password}, REMOTE_ADDR=ip)


@pytest.mark.django_db
def test_wrong_passwords_lock_the_username_from_that_address(settings, viewer):
    settings.LOGIN_MAX_FAILURES, settings.LOGIN_LOCKOUT_S = 5, 600
    client = Client()
    for _ in range(5):
        resp = _login(client, "victor", "wrong")
        assert resp.status_code == 200 and "_auth_user_id" not in client.session
    resp = _login(client, "victor", PASSWORD)  # the right password, but locked
    assert resp.status_code == 200 and "_auth_user_id" not in client.session
    assert "Too many failed sign-ins. Try again in 10 minutes." in resp.content.decode()
    # the admin's login is locked too (the check is in the authentication backend)
    viewer.is_staff = True
    viewer.save()
    admin_client = Client()
    assert _login(admin_client, "victor", PASSWORD, path="/admin/login/").status_code == 200
    assert "_auth_user_id" not in admin_client.session
    # another address is not locked out of the account by this one
    other = Client()
    assert _login(other, "victor", PASSWORD, ip="10.0.0.2").status_code == 302
    assert "_auth_user_id" in other.session


@pytest.mark.django_db
def test_a_success_resets_the_count_and_one_address_cannot_spray_usernames(settings, viewer, engineer):
    settings.LOGIN_MAX_FAILURES, settings.LOGIN_MAX_FAILURES_PER_IP = 3, 6
    client = Client()
    for _ in range(2):
        _login(client, "victor", "wrong")
    assert _login(client, "victor", PASSWORD).status_code == 302
    for _ in range(2):
        _login(Client(), "victor", "wrong")
    assert _login(Client(), "victor", PASSWORD).status_code == 302  # the count started again
    for name in ("a", "b", "c", "d"):
        _login(Client(), name, "wrong")
    resp = _login(Client(), "erin", PASSWORD)  # 6 failures from this address: every username refused
    assert resp.status_code == 200 and "Too many failed sign-ins" in resp.content.decode()


@pytest.mark.django_db
def test_api_requests_are_rate_limited(settings, api_for, viewer):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK,
                               "DEFAULT_THROTTLE_RATES": {"anon": "3/minute", "user": "5/minute"}}
    api = api_for(viewer)
    codes = [api.get("/api/projects/").status_code for _ in range(6)]
    assert codes == [200] * 5 + [429]
