"""Browser-test fixtures, shared by every browser test (registered once in tests/conftest.py).

Playwright driving Debian's Chromium (never a downloaded browser) against a live test server."""
from __future__ import annotations

import contextlib
import os
import shutil
import warnings
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("CHROMIUM_PATH") or shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOTS = Path(__file__).resolve().parents[1] / "artifacts" / "screenshots"
# Playwright's sync API runs an event loop in this thread; the ORM calls the tests make are still synchronous.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

# Every Playwright wait (actions, navigation, expect) waits on its event for up to this long: on a busy machine a
# page of this app can take tens of seconds to answer, and a shorter bound fails tests that are right. The bound
# only guards against a hang; a wait on a worker or a trainer that needs more names its own, longer timeout.
PAGE_TIMEOUT_MS = 180_000

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (apt-get install chromium)")
    playwright_api = pytest.importorskip("playwright.sync_api")
    playwright_api.expect.set_options(timeout=PAGE_TIMEOUT_MS)
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        # Contexts bypass the Content-Security-Policy unless asked not to: Playwright's
        # wait_for_function("expression") evaluates strings in the page, which the policy forbids.
        # tests/browser/test_csp.py loads the pages with the policy on.
        # Every context, also those a test opens for a second user, waits PAGE_TIMEOUT_MS by default
        # (navigation too: no navigation timeout is set apart).
        new_context = b.new_context

        def patient_context(**kw):
            context = new_context(**{"bypass_csp": True, **kw})
            context.set_default_timeout(PAGE_TIMEOUT_MS)
            return context

        b.new_context = patient_context
        yield b
        b.close()


@pytest.fixture
def page(browser):
    # en-US pins the date format the timezone test reads; Europe/Paris differs from the server's UTC.
    context = browser.new_context(viewport={"width": 1400, "height": 900}, timezone_id="Europe/Paris",
                                  locale="en-US")
    pg = context.new_page()
    yield pg
    context.close()


@pytest.fixture
def shot(request):
    """`shot(page, "name")` saves a full-page screenshot as a test artifact."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    counter = {"n": 0}

    def take(pg, name: str) -> Path | None:
        from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
        counter["n"] += 1
        path = SCREENSHOTS / f"{request.node.name}-{counter['n']:02d}-{name}.png"
        # A screenshot is an artifact, not an assertion: a starved Chromium that cannot paint a tall live page
        # in time gets a viewport shot, then a warning, instead of failing the test it documents.
        for full_page in (True, False):
            try:
                pg.screenshot(path=str(path), full_page=full_page, timeout=90_000)
                return path
            except PlaywrightTimeoutError:
                continue
        warnings.warn(f"no screenshot {path.name}: Chromium did not paint the page in time", stacklevel=2)
        return None

    return take


def login(page, live_server, username: str, password: str) -> None:
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/login/" not in url)


def start_test_run(page) -> None:
    """Click a reward's "Run test" once the page's script has bound the form (marked ready): clicked earlier, the
    form posts without scripts and the browser leaves for the test-run's own page."""
    page.wait_for_selector("#test-run-form[data-ready]")
    page.get_by_role("button", name="Run test").click()


@pytest.fixture
def celery_beat_proc(transactional_db, tmp_path, settings):
    """A real beat scheduler (the run sync every 2 s) against the test database."""
    import subprocess
    import sys

    from tests.conftest import _database_url_for_current_connection

    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, DATABASE_URL=_database_url_for_current_connection(), RUNS_ROOT=str(settings.RUNS_ROOT),
               MODELS_ROOT=str(settings.MODELS_ROOT))
    log = tmp_path / "beat.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "celery", "-A", "jobs", "beat", "-l", "info", "-s",
                                 str(tmp_path / "beat-schedule")], cwd=root, env=env, stdout=fh,
                                stderr=subprocess.STDOUT, start_new_session=True)
    proc.log_path = log
    yield proc
    proc.terminate()
    proc.wait(timeout=15)


@pytest.fixture
def stop_runs(settings):
    """Training supervisors run in their own sessions (a worker restart must not kill them): stop the
    ones this test started, by the pids their attempts recorded, when the test ends."""
    import signal

    yield
    for pid_file in Path(settings.RUNS_ROOT).glob("**/attempts/*/supervisor.pid"):
        with contextlib.suppress(ValueError, ProcessLookupError, PermissionError):
            os.killpg(int(pid_file.read_text().strip()), signal.SIGTERM)
