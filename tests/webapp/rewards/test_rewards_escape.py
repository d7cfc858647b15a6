"""Malicious rewards test-run from the app: each is contained and reported, and the app keeps serving."""
from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.django_db

HEADER = "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"


@pytest.fixture
def needs_bubblewrap():
    from training.sandbox import isolation_info

    if isolation_info()["mode"] != "bubblewrap":
        pytest.skip("hiding the app's files needs bubblewrap; rlimits mode only limits resources")


@pytest.fixture
def short_limits(settings):
    settings.REWARD_TIME_LIMIT_S = 1.0
    settings.REWARD_MEMORY_MB = 512


def _run(client, project, reward_fn, arith, source: str, responses: str = "1"):
    resp = client.post(f"/api/projects/{project.slug}/rewards/{reward_fn.pk}/test-run/",
                       {"source": source, "dataset_version": arith.pk, "responses": responses},
                       content_type="application/json")
    assert resp.status_code == 202, resp.content
    return resp.json()


def _still_serving(client, project, reward_fn):
    assert client.get(f"/p/{project.slug}/rewards/{reward_fn.pk}/").status_code == 200
    assert client.get("/healthz").status_code == 200


@pytest.mark.parametrize("body, expect", [
    ("while True:\n        pass\n", "timed out"),
    ("import os, signal\n    os.kill(os.getppid(), signal.SIGKILL)\n    return 1.0\n", None),
    ("import os\n    os.killpg(0, 9)\n    return 1.0\n", None),
])
def test_hostile_rewards_are_contained(as_user, engineer, project, reward_fn, arith, short_limits, body, expect):
    client = as_user(engineer)
    pid = os.getpid()
    run = _run(client, project, reward_fn, arith, HEADER + "    " + body, responses="1\n2")
    assert os.getpid() == pid  # this (web) process is alive: we are still running
    if expect:
        assert all(expect in (r["error"] or "") for r in run["results"])
    assert all(r["score"] is None or r["score"] == 1.0 for r in run["results"])
    _still_serving(client, project, reward_fn)


def test_reward_code_cannot_read_the_app_settings_or_environment(as_user, engineer, project, reward_fn, arith,
                                                                 settings, monkeypatch, needs_bubblewrap):
    monkeypatch.setenv("WORKBENCH_TEST_SECRET", "s3cret-value")
    settings_file = settings.BASE_DIR / "webapp" / "settings.py"
    assert "SECRET_KEY" in settings_file.read_text()  # readable here, in the app
    source = (
        "import os\n" + HEADER +
        "    if ground_truth == '3':\n"
        f"        return {{'score': 1.0, 'text': open({str(settings_file)!r}).read()[:50]}}\n"
        "    return {'score': 0.0, 'text': os.environ.get('WORKBENCH_TEST_SECRET', 'absent')}\n")
    run = _run(as_user(engineer), project, reward_fn, arith, source, responses="a\nb")
    opened, env = run["results"]
    assert opened["score"] is None and opened["error"]  # the file is not there for the reward
    assert ("FileNotFoundError" in opened["error"]) or ("PermissionError" in opened["error"])
    assert env["extra"] == {"text": "absent"}
    assert "s3cret-value" not in str(run)


def test_reward_code_cannot_reach_the_database_file(as_user, engineer, project, reward_fn, arith, needs_bubblewrap):
    from django.db import connection

    name = str(connection.settings_dict["NAME"])
    if not os.path.isabs(name):
        pytest.skip("not a SQLite file database")
    source = HEADER + f"    return float(len(open({name!r}, 'rb').read(16)))\n"
    run = _run(as_user(engineer), project, reward_fn, arith, source)
    assert run["results"][0]["score"] is None and run["results"][0]["error"]
