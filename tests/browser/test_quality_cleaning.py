"""The README's cleaning step as a newcomer follows it: run the report against the evaluation set, press
"Create the cleaned version" without changing anything — the default ticks leave rows (v2 without the
duplicates); and an impossible choice is explained beside the button, the ticks kept."""
from __future__ import annotations

import re

import pytest

from tests.browser_support import login
from tests.conftest import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_readme_cleaning_step_works_with_the_defaults(page, live_server, project, engineer, settings,
                                                          monkeypatch, shot):
    from webapp.datasets.demo import ARITHMETIC, PREFERENCES, seed_demo
    from webapp.datasets.models import DatasetVersion, QualityReport
    from webapp.datasets.quality_service import report_run

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    seed_demo(project=project, user=engineer, log=lambda _: None)
    monkeypatch.setattr("webapp.datasets.quality_service.enqueue", lambda *a, **kw: None)  # the test plays the worker
    prefs = DatasetVersion.objects.get(dataset__name=PREFERENCES)
    login(page, live_server, "erin", PASSWORD)
    page.goto(f"{live_server.url}/p/acme/datasets/")
    page.get_by_role("link", name=PREFERENCES).click()
    page.get_by_role("link", name="Quality").click()
    page.wait_for_url("**/v1/quality/")
    page.get_by_label(re.compile(f"{ARITHMETIC} v1")).check()
    page.click("#run-report")
    page.wait_for_selector("#report-bar")
    with page.expect_navigation():
        report_run(report_id=QualityReport.objects.get().pk)
    page.wait_for_selector("#clean-form")
    report = QualityReport.objects.get()
    near = len(set(report.drops["near_duplicates"]) | set(report.drops["exact_duplicates"]))
    assert len(report.drops["contaminated"]) == prefs.row_count  # every demo pair is contaminated

    # what the form ticks at first keeps rows, and says why contamination is not ticked
    contaminated = page.get_by_role("checkbox", name=re.compile("overlap the evaluation sets"))
    assert not contaminated.is_checked()
    assert "covers all" in page.inner_text("#clean-note-contaminated")
    assert page.get_by_role("checkbox", name=re.compile("Near-duplicates")).is_checked()
    assert f"keeps {prefs.row_count - near} of {prefs.row_count}" in page.inner_text("#clean-kept")
    shot(page, "clean-defaults")

    # ticking everything cannot work: the reason appears beside the button, with the ticks as they were
    contaminated.check()
    page.click("#clean-submit")
    error = page.locator("#clean-error")
    error.wait_for()
    assert "Every row would be dropped" in error.inner_text()
    button, message = page.locator("#clean-submit").bounding_box(), error.bounding_box()
    assert 0 <= message["y"] - (button["y"] + button["height"]) < 80  # right under the button, not at the top
    assert page.get_by_role("checkbox", name=re.compile("overlap the evaluation sets")).is_checked()
    assert DatasetVersion.objects.filter(dataset=prefs.dataset).count() == 1
    shot(page, "clean-error")

    # the README's step as written: take the defaults and press the button
    page.goto(f"{live_server.url}/p/acme/datasets/{prefs.dataset_id}/v1/quality/")
    with page.expect_navigation(url="**/v2/"):
        page.click("#clean-submit")
    new = DatasetVersion.objects.get(dataset=prefs.dataset, number=2)
    assert new.row_count == prefs.row_count - near > 0
    assert f"Created v2: {new.row_count:,} rows kept" in page.inner_text(".messages")
