"""Error reports (the DEBUG page, error e-mails) never show credentials from the settings."""
from __future__ import annotations

import re

from django.views.debug import SafeExceptionReporterFilter

_PUBLIC = frozenset({"STATIC_URL", "MEDIA_URL", "LOGIN_URL", "LOGIN_REDIRECT_URL", "LOGOUT_REDIRECT_URL",
                     "ROOT_URLCONF"})
_USERINFO = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:/@\s]*):(?P<password>[^@/\s]*)@", re.I)


def mask_url_password(value: str) -> str:
    """redis://:pw@host/0 -> redis://:********************@host/0 (any scheme, user kept)."""
    return _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{SafeReporterFilter.cleansed_substitute}@", value)


class SafeReporterFilter(SafeExceptionReporterFilter):
    """Django's filter masks names with KEY/TOKEN/PASS...; this one also masks URLs and DSNs (REDIS_URL,
    CELERY_BROKER_URL, DATABASE_URL) whole, and a password inside any other URL-like value."""

    hidden_settings = re.compile(
        "API|TOKEN|KEY|SECRET|PASS|SIGNATURE|HTTP_COOKIE|URL|DSN|BROKER|DATABASE|CREDENTIAL|AUTH", flags=re.I)

    def cleanse_setting(self, key, value):
        if key in _PUBLIC:
            return value
        value = super().cleanse_setting(key, value)
        return mask_url_password(value) if isinstance(value, str) else value
