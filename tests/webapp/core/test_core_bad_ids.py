"""Bad ids in paths and query strings (overflowing, negative, not numbers) answer 400/404, never 500."""
from __future__ import annotations

import re

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

HUGE = "99999999999999999999"
QUERY_VALUES = (HUGE, "-1", "abc", "1e3", "9" * 400)
QUERY_NAMES = ("jobs", "step", "page", "attempt", "after", "before", "row", "item", "tokenizer", "version", "run",
               "limit", "offset", "job", "checkpoint", "dataset_version", "id", "template", "number", "name")


def _routes(resolver=None, prefix=""):
    resolver = resolver or get_resolver()
    for entry in resolver.url_patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from _routes(entry, route)
        elif isinstance(entry, URLPattern):
            yield route


def _fill(route: str, slug: str, number: str) -> str | None:
    if route.startswith(("admin/", "^")) or "(?P" in route or "<path:" in route:
        return None
    path = re.sub(r"<slug:slug>|<str:slug>", slug, route)
    path = re.sub(r"<int:[a-z_]+>", number, path)
    path = re.sub(r"<(str|slug):[a-z_]+>", "x", path)
    return "/" + path if "<" not in path else None


@pytest.mark.django_db
def test_no_page_or_api_answers_500_to_bad_ids(as_user, admin_user, project):
    client = as_user(admin_user)
    client.raise_request_exception = False
    paths = sorted({p for r in _routes() if (p := _fill(r, project.slug, HUGE))})
    assert len(paths) > 40
    failures = []
    for path in paths:
        for value in QUERY_VALUES[:1] if "<" in path else QUERY_VALUES:
            query = "&".join(f"{name}={value}" for name in QUERY_NAMES)
            resp = client.get(f"{path}?{query}")
            if resp.status_code >= 500:
                failures.append((path, value, resp.status_code))
    assert failures == []


@pytest.mark.django_db
def test_compare_with_an_overflowing_job_id_is_not_a_500(as_user, viewer, project):
    client = as_user(viewer)
    client.raise_request_exception = False
    resp = client.get(f"/projects/{project.slug}/monitor/compare/?jobs={HUGE}")
    assert resp.status_code in (200, 400, 404)
    resp = client.get(f"/api/projects/{project.slug}/monitor/compare/?jobs={HUGE}&name=x")
    assert resp.status_code in (400, 404)


def test_parse_id_accepts_only_ids_in_the_database_range():
    from webapp.core.params import MAX_ID, parse_id

    assert parse_id("42") == 42 and parse_id(str(MAX_ID)) == MAX_ID
    for bad in (HUGE, str(MAX_ID + 1), "0", "-1", "abc", "1e3", "", " ", "4 2"):
        with pytest.raises(ValueError):
            parse_id(bad)


def test_an_overflow_a_view_missed_is_a_400(rf):
    from webapp.core.middleware import OutOfRangeMiddleware

    mw = OutOfRangeMiddleware(lambda r: None)
    assert mw.process_exception(rf.get("/projects/x/"), OverflowError("too big")).status_code == 400
    assert mw.process_exception(rf.get("/api/projects/x/"), OverflowError("too big")).status_code == 400
    assert mw.process_exception(rf.get("/"), KeyError("x")) is None
