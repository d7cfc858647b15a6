"""A refused request is one line in the server's log, whichever way it was refused: a page, the API, a
missing CSRF token. The console handler's own output is read, as an operator would see it."""
from __future__ import annotations

import io
import logging

import pytest
from django.test import Client


@pytest.fixture
def console(settings):
    """What a handler on Django's request and security loggers writes (their filters included)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    loggers = [logging.getLogger(name) for name in ("django.request", "django.security")]
    for logger in loggers:
        logger.addHandler(handler)
    yield stream
    for logger in loggers:
        logger.removeHandler(handler)


def _lines(stream) -> list[str]:
    return [line for line in stream.getvalue().splitlines() if line.strip()]


def test_a_page_403_is_one_line(as_user, viewer, console):
    assert as_user(viewer).get("/p/acme/settings/").status_code == 403
    assert _lines(console) == ["Forbidden (Permission denied): /p/acme/settings/ "
                               "(This needs the admin role in Acme RLHF.)"]


def test_an_api_403_is_one_line(api_for, viewer, console):
    response = api_for(viewer).post("/api/projects/acme/members/", {"username": "x", "role": "viewer"},
                                    format="json")
    assert response.status_code == 403
    lines = _lines(console)
    assert len(lines) == 1 and lines[0].startswith("Forbidden") and "Traceback" not in console.getvalue()


def test_a_csrf_403_is_one_line(viewer, console):
    client = Client(enforce_csrf_checks=True)
    client.force_login(viewer)
    assert client.post("/p/acme/settings/", {"review_overlap": 2}).status_code == 403
    lines = _lines(console)
    assert len(lines) == 1 and lines[0].startswith("Forbidden (CSRF") and "Traceback" not in console.getvalue()
