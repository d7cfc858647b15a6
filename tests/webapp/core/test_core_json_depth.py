"""Deeply nested JSON is a 400 everywhere, from one place (webapp/core/jsonsafe.py): a JSON body to any URL
(every pattern is tried, so a new endpoint is covered when it is added), JSON inside a form field, pasted JSON."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from django import forms
from rest_framework import serializers

from tests.webapp.core.test_core_bad_ids import _fill, _routes
from webapp.core import jsonsafe

DEEP_ARRAY = "[" * 1000 + "]" * 1000
DEEP_OBJECT = '{"a":' * 1000 + "1" + "}" * 1000
TOO_DEEP = f"nested deeper than {jsonsafe.MAX_DEPTH} levels"


def test_depth_counts_nesting_not_brackets_inside_strings():
    limit = jsonsafe.MAX_DEPTH
    assert jsonsafe.too_deep(DEEP_ARRAY) and jsonsafe.too_deep(DEEP_OBJECT.encode())
    assert not jsonsafe.too_deep("[" * limit + "]" * limit) and jsonsafe.too_deep("[" * (limit + 1))
    assert not jsonsafe.too_deep('{"text": "' + "[" * 5000 + '"}')  # brackets in a string are text
    assert not jsonsafe.too_deep('["a \\" ' + "{" * 5000 + '"]')  # an escaped quote does not end the string
    assert not jsonsafe.too_deep("[" + ",".join(["[1]"] * 10_000) + "]")  # wide is fine, only deep is refused
    with pytest.raises(jsonsafe.JSONTooDeep):
        jsonsafe.loads(DEEP_OBJECT)
    assert jsonsafe.loads('{"a": [1, {"b": 2}]}') == {"a": [1, {"b": 2}]}


@pytest.mark.django_db
def test_every_url_answers_a_deeply_nested_json_body_with_a_400(as_user, admin_user, project):
    admin_user.is_staff = admin_user.is_superuser = True
    admin_user.save()
    client = as_user(admin_user)
    client.raise_request_exception = False
    paths = sorted({p for r in _routes() if (p := _fill(r, project.slug, "1"))})
    assert len(paths) > 100 and "/api/projects/acme/rewards/check/" in paths
    tries = [("post", path, body) for path in paths for body in (DEEP_ARRAY, DEEP_OBJECT)]
    tries += [(method, path, DEEP_OBJECT) for method in ("put", "patch", "delete") for path in paths[::10]]
    wrong = []
    for method, path, body in tries:
        resp = getattr(client, method)(path, data=body, content_type="application/json")
        if resp.status_code != 400 or TOO_DEEP not in resp.content.decode():
            wrong.append((method, path, resp.status_code))
    assert wrong == []


@pytest.mark.django_db
def test_the_api_says_so_in_json_and_pages_on_the_styled_error_page(api_for, as_user, admin_user, project):
    resp = api_for(admin_user).post(f"/api/projects/{project.slug}/members/", data=DEEP_ARRAY,
                                    content_type="application/json")
    assert resp.status_code == 400 and TOO_DEEP in resp.json()["detail"]
    page = as_user(admin_user).post(f"/p/{project.slug}/members/", data=DEEP_OBJECT, content_type="application/json")
    assert page.status_code == 400 and 'class="topbar"' in page.content.decode()
    ok = api_for(admin_user).post(f"/api/projects/{project.slug}/members/",
                                  {"username": "newbie", "role": "viewer"}, format="json")
    assert ok.status_code == 202  # shallow JSON reaches the view as before


@pytest.mark.django_db
def test_json_inside_a_form_field_is_bounded_too(api_for, admin_user, project):
    # DRF parses a JSON field sent in a form (multipart) itself: reward_spec here
    resp = api_for(admin_user).post(f"/api/projects/{project.slug}/jobs/", {"reward_spec": DEEP_OBJECT},
                                    format="multipart")
    assert resp.status_code == 400 and TOO_DEEP in str(resp.json())
    with pytest.raises(forms.ValidationError, match=TOO_DEEP):
        jsonsafe.FormJSONField().clean(DEEP_ARRAY)
    with pytest.raises(serializers.ValidationError, match=TOO_DEEP):
        jsonsafe.JSONField(binary=True).run_validation(DEEP_ARRAY)


def test_pasted_responses_nested_too_deep_are_a_clear_error():
    from webapp.rewards.samples import SampleError, parse_responses

    for text in (DEEP_ARRAY, DEEP_OBJECT, '{"response": "ok"}\n' + DEEP_OBJECT):
        with pytest.raises(SampleError, match="nested deeper"):
            parse_responses(text)


def test_no_module_parses_json_fields_without_the_bound():
    """New forms and serializers use jsonsafe's fields: Django's and DRF's own parse any depth."""
    root = Path(__file__).resolve().parents[3] / "webapp"
    offenders = [str(p.relative_to(root)) for p in root.rglob("*.py")
                 if p.name != "jsonsafe.py" and re.search(r"\b(serializers|forms)\.JSONField\(", p.read_text())]
    assert offenders == []


def test_a_recursion_error_a_view_missed_is_a_400(rf):
    from webapp.core.middleware import JSONBodyMiddleware

    mw = JSONBodyMiddleware(lambda r: None)
    assert mw.process_exception(rf.post("/api/projects/x/"), RecursionError("deep")).status_code == 400
    assert mw.process_exception(rf.post("/api/projects/x/"), KeyError("x")) is None
