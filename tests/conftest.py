"""Shared fixtures: the team personas of a project (healthchecks-style alice/bob/charlie)."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from django.test import Client

# One session-wide Playwright/Chromium for every browser test, wherever it lives (a second
# sync_playwright() while one is running fails).
from tests.browser_support import browser, celery_beat_proc, page, shot, stop_runs  # noqa: E402,F401
from tests.smollm2_support import smollm2_dir, smollm2_student_dir  # noqa: F401
from webapp.core.models import Membership, Project, Role

PASSWORD = "pw-for-tests-1"


@pytest.fixture(autouse=True)
def _isolated_files(settings, tmp_path):
    """Uploads, run directories and models of a test live in its own temporary folder."""
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.RUNS_ROOT = tmp_path / "runs"
    settings.MODELS_ROOT = tmp_path / "models"
    for path in (settings.MEDIA_ROOT, settings.RUNS_ROOT, settings.MODELS_ROOT):
        path.mkdir(parents=True, exist_ok=True)
    # Small uploads import in the request here, so a test sees the result of the page it posts to;
    # the worker path (the default) is tested where the tests set 0.
    settings.DATASET_SYNC_IMPORT_MB = 4


@pytest.fixture(autouse=True)
def _fresh_throttle_counts(settings, request):
    """Sign-in failures and API rates start from zero in each test (a private in-memory cache)."""
    settings.CACHES = {**settings.CACHES, "throttle": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                                       "LOCATION": f"throttle-{request.node.nodeid}"}}


@pytest.fixture
def broken_bwrap(monkeypatch, tmp_path):
    """A host where bubblewrap cannot create its namespaces (as in a container that refuses user namespaces):
    a `bwrap` first on PATH that fails the way the real one does there. Processes started from here (a
    Celery worker, the supervisor) inherit the PATH; this process probes again on first use."""
    from training.sandbox import isolation

    bindir = tmp_path / "broken-bwrap-bin"
    bindir.mkdir()
    fake = bindir / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    monkeypatch.delenv(isolation.ALLOW_UNISOLATED, raising=False)
    isolation.forget_probe()
    yield fake
    isolation.forget_probe()


@pytest.fixture
def project(db, django_user_model):
    return Project.objects.create(slug="acme", name="Acme RLHF")


def _member(django_user_model, project, username, role):
    user = django_user_model.objects.create_user(username=username, password=PASSWORD)
    if role is not None:
        Membership.objects.create(project=project, user=user, role=role)
    return user


@pytest.fixture
def admin_user(project, django_user_model):
    return _member(django_user_model, project, "alice", Role.ADMIN)


@pytest.fixture
def engineer(project, django_user_model):
    return _member(django_user_model, project, "erin", Role.ENGINEER)


@pytest.fixture
def reviewer(project, django_user_model):
    return _member(django_user_model, project, "rita", Role.REVIEWER)


@pytest.fixture
def reviewer2(project, django_user_model):
    return _member(django_user_model, project, "rob", Role.REVIEWER)


@pytest.fixture
def viewer(project, django_user_model):
    return _member(django_user_model, project, "victor", Role.VIEWER)


@pytest.fixture
def outsider(project, django_user_model):
    return _member(django_user_model, project, "oscar", None)


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def as_user():
    """`as_user(user)` returns a logged-in test client."""
    return client_for


@pytest.fixture
def api_for():
    """`api_for(user)` returns a DRF client authenticated with the user's API token."""
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    def make(user):
        token, _ = Token.objects.get_or_create(user=user)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
        return client

    return make


def _database_url_for_current_connection() -> str:
    from django.db import connection

    s = connection.settings_dict
    if s["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{s['NAME']}"
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


WORKER_QUEUES = ("cpu,gpu", "usercode")  # as ./run and docker-compose: user reward code in its own worker


def start_celery_workers(settings, log: Path, queues=WORKER_QUEUES, extra_env: dict | None = None) -> list:
    """Real Celery worker processes (one per entry of `queues`, solo pool) on the configured broker and the
    test database, all logging to `log`; returns their Popens once every one says "ready."."""
    import subprocess
    import sys
    import time

    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ)
    env.update(DATABASE_URL=_database_url_for_current_connection(), PYTHONUNBUFFERED="1",
               RUNS_ROOT=str(settings.RUNS_ROOT), MODELS_ROOT=str(settings.MODELS_ROOT), **(extra_env or {}))
    procs = []
    with open(log, "ab") as fh:  # started together: each takes seconds to import the app
        for q in queues:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "jobs", "worker", "-Q", q, "--pool=solo",
                 "--concurrency=1", "-l", "info", "--without-heartbeat", "--without-mingle", "--without-gossip",
                 "-n", f"test-{q.split(',')[0]}-{os.getpid()}@%h"],
                cwd=root, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True))
    deadline = time.time() + 600  # importing the app on a busy machine; only a guard against a hang
    while time.time() < deadline and log.read_bytes().count(b"ready.") < len(procs):
        if any(p.poll() is not None for p in procs):
            stop_celery_workers(procs)
            raise RuntimeError("celery worker exited early:\n" + log.read_text())
        time.sleep(0.2)
    for p in procs:
        p.log_path = log
    return procs


def stop_celery_workers(procs) -> None:
    import subprocess

    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()


@pytest.fixture
def celery_worker_proc(transactional_db, tmp_path, settings):
    """Real Celery workers, as ./run has them: one on the cpu and gpu queues, one on the usercode queue (user
    reward code). Returns the first (`.log_path`: both workers' log; `.usercode`: the second).

    Tests that use it must commit their data (transactional_db) so the workers can see it.
    """
    procs = start_celery_workers(settings, tmp_path / "worker.log")
    procs[0].usercode = procs[1]
    yield procs[0]
    stop_celery_workers(procs)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_setupnodes(config, specs):
    """Under `pytest -n N` each worker gets its own var folder (SQLite test database, folder broker,
    caches, secret key) and, with REDIS_URL, its own Redis database, so that one worker's Celery
    workers never take another's tasks. pytest-django adds the _gwN suffix to test database names.
    The worker process reads these before Django starts (settings read them at import)."""
    base = Path(os.environ.get("WORKBENCH_VAR_DIR") or Path(__file__).resolve().parents[1] / "var" / "test")
    redis_url = os.environ.get("REDIS_URL", "")
    for index, spec in enumerate(specs):
        spec.env["WORKBENCH_VAR_DIR"] = str(base / f"xdist-{spec.id}")
        if redis_url:
            spec.env["REDIS_URL"] = redis_db_url(redis_url, index)


def redis_db_url(url: str, offset: int) -> str:
    """`url` with its database number moved up by `offset` (redis://h:6379/9, 2 -> redis://h:6379/11)."""
    match = re.match(r"^(rediss?://[^/?#]*)(?:/(\d*))?(.*)$", url)
    if match is None:
        raise pytest.UsageError(f"REDIS_URL {url!r}: parallel workers need a redis:// URL (or run with -n 0)")
    db = int(match.group(2) or 0) + offset
    if db > 15:
        raise pytest.UsageError(f"REDIS_URL {url!r}: worker {offset} would need Redis database {db} (> 15)")
    return f"{match.group(1)}/{db}{match.group(3)}"


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    """Slow tests first, sorted before pytest-django's own (stable) sort into database, transactional and
    other tests, so that within each group the longest ones (VERL runs, a Ray cluster) do not start last and
    hold the end of the run. Browser tests last, after it: Playwright's sync API keeps an event loop running
    in the main thread for the rest of the session, which breaks later tests that start their own loop."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    result = yield
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)
    return result
