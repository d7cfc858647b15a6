"""In Chromium: from a run, build its diagnostic bundle with one click, wait for the worker, read its file list and
download the zip; the secret planted in the run's log is not in it."""
from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from tests.browser.browser_helpers import PASSWORD, seed_project
from tests.browser_support import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_build_and_download_a_runs_diagnostic_bundle(page, live_server, project, engineer, tmp_path, settings,
                                                     monkeypatch, shot):
    from webapp.monitoring.models import DiagnosticBundle
    from webapp.monitoring.services.bundle import bundle_run

    settings.SECRET_KEY = "planted-secret-key-for-the-browser-7"
    engineer.set_password(PASSWORD)
    engineer.save()
    job = seed_project(project, engineer, tmp_path).job
    attempt = Path(job.run_dir) / "attempts" / "1"
    attempt.mkdir(parents=True)
    (attempt / "log.txt").write_text(f"loading\nSECRET_KEY is {settings.SECRET_KEY}\nstep:20 - done\n")
    monkeypatch.setattr("webapp.monitoring.services.bundle.enqueue", lambda *a, **kw: None)  # the test is the worker

    login(page, live_server, engineer.username, PASSWORD)
    page.goto(f"{live_server.url}/p/{project.slug}/monitor/jobs/{job.pk}/")
    page.get_by_role("link", name="Diagnostic bundle").click()
    page.get_by_label("Rollout samples of the last").fill("3")
    page.get_by_role("button", name="Build a diagnostic bundle").click()
    page.get_by_text("building on a worker…").wait_for()
    shot(page, "bundle-building")
    bundle = DiagnosticBundle.objects.get(job=job)
    assert bundle.sample_steps == 3 and bundle.created_by == engineer
    bundle_run(bundle_id=bundle.pk)
    link = page.get_by_role("link", name="Download the zip")
    link.wait_for()  # the page follows the worker
    page.locator("#bundles summary").click()
    listed = page.locator(".bundle-files li code").all_inner_texts()
    assert {"versions.json", "attempts/1/log.txt", "metrics.csv", "history/guard.json", "data.json"} <= set(listed)
    shot(page, "bundle-ready")
    with page.expect_download() as info:
        link.click()
    data = Path(info.value.path()).read_bytes()
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        names = set(zf.namelist())
        log = zf.read("attempts/1/log.txt").decode()
        csv_head = zf.read("metrics.csv").decode().splitlines()[0]
    assert set(listed) == names
    assert "step:20 - done" in log and settings.SECRET_KEY not in log and "[redacted]" in log
    assert csv_head == "step,actor/kl_loss,critic/score/mean"
