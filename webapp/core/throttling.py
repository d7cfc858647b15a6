"""Sign-in lockout and API rates, counted in the shared "throttle" cache (every web process sees the counts).

Sign-ins: after LOGIN_MAX_FAILURES wrong passwords for one username from one address (or
LOGIN_MAX_FAILURES_PER_IP for any usernames from one address), that pair (or address) is refused for
LOGIN_LOCKOUT_S, right password or not. The check lives in an authentication backend, so the login
page, the admin's login and anything else that calls `authenticate()` share it.
"""
from __future__ import annotations

import hashlib

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.core.cache import caches
from django.core.exceptions import PermissionDenied
from django.dispatch import receiver
from rest_framework.throttling import AnonRateThrottle, UserRateThrottle

from webapp.core.sessions import take_session_user

CACHE_ALIAS = "throttle"


def _cache():
    return caches[CACHE_ALIAS]


def client_ip(request) -> str:
    return (getattr(request, "META", None) or {}).get("REMOTE_ADDR") or "unknown"


def _keys(request, username: str | None) -> tuple[str, str]:
    ip = client_ip(request)
    pair = hashlib.sha256(f"{(username or '').strip().lower()}\0{ip}".encode()).hexdigest()
    return f"login-fail:pair:{pair}", f"login-fail:ip:{hashlib.sha256(ip.encode()).hexdigest()}"


def login_locked(request, username: str | None) -> bool:
    pair, ip = _keys(request, username)
    counts = _cache().get_many([pair, ip])
    return (counts.get(pair, 0) >= settings.LOGIN_MAX_FAILURES
            or counts.get(ip, 0) >= settings.LOGIN_MAX_FAILURES_PER_IP)


def lockout_message() -> str:
    minutes = max(1, round(settings.LOGIN_LOCKOUT_S / 60))
    return f"Too many failed sign-ins. Try again in {minutes} minute{'s' if minutes != 1 else ''}."


def _count_failure(request, username: str | None) -> None:
    cache = _cache()
    for key in _keys(request, username):
        # add() starts the window; incr() keeps it (the lockout runs from the first failure of the series)
        if not cache.add(key, 1, timeout=settings.LOGIN_LOCKOUT_S):
            try:
                cache.incr(key)
            except ValueError:  # expired in between
                cache.add(key, 1, timeout=settings.LOGIN_LOCKOUT_S)


class ThrottledModelBackend(ModelBackend):
    """Django's backend, refusing (PermissionDenied stops every backend) while a lockout runs."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is not None and login_locked(request, username or kwargs.get("username")):
            raise PermissionDenied(lockout_message())
        return super().authenticate(request, username=username, password=password, **kwargs)

    def get_user(self, user_id):
        # The request's session was read with its user (webapp.core.sessions): no second query.
        user = take_session_user(user_id)
        if user is None:
            return super().get_user(user_id)
        return user if self.user_can_authenticate(user) else None


@receiver(user_login_failed)
def _on_login_failed(sender, credentials, request=None, **kwargs):
    if request is not None:
        _count_failure(request, credentials.get("username"))


@receiver(user_logged_in)
def _on_logged_in(sender, request, user, **kwargs):
    if request is not None:
        _cache().delete(_keys(request, user.get_username())[0])


class _SharedRates:
    """DRF's rate throttles, counted in the shared cache, with the rates read when used (not at import)."""

    cache = property(lambda self: _cache())

    def get_rate(self):
        from rest_framework.settings import api_settings

        return api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)


class AnonThrottle(_SharedRates, AnonRateThrottle):
    pass


class UserThrottle(_SharedRates, UserRateThrottle):
    pass
