"""The DEBUG error page (and error e-mails) never show credentials from the settings or the environment."""
from __future__ import annotations

import sys

from django.views.debug import technical_500_response

SECRET = "hunter2-very-secret"


def test_debug_error_page_masks_broker_database_and_passwords_in_urls(rf, settings):
    settings.DEBUG = True
    settings.REDIS_URL = f"redis://:{SECRET}@redis:6379/0"
    settings.CELERY_BROKER_URL = f"redis://default:{SECRET}@redis:6379/0"
    settings.DATABASE_URL = f"postgres://workbench:{SECRET}@db:5432/workbench"
    settings.SENTRY_ENDPOINT = f"https://user:{SECRET}@errors.example/1"
    request = rf.get("/projects/x/monitor/compare/?jobs=1", HTTP_X_DEBUG="1")
    request.META["REDIS_URL"] = f"redis://:{SECRET}@redis:6379/0"  # runserver copies the environment in
    try:
        raise OverflowError("boom")
    except OverflowError:
        page = technical_500_response(request, *sys.exc_info()).content.decode()
    assert "OverflowError" in page and "REDIS_URL" in page and "DATABASE_URL" in page
    assert SECRET not in page
    assert "/static/" in page  # public settings are still shown


def test_password_in_any_url_setting_is_masked():
    from webapp.core.reporting import mask_url_password

    assert SECRET not in mask_url_password(f"amqp://guest:{SECRET}@rabbit:5672//")
    assert mask_url_password("https://example.org/a:b@c") == "https://example.org/a:b@c"
