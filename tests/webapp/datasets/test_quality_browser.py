"""In Chromium: the demo preference set's Quality tab — run the report, watch it finish, read it, clean it."""
from __future__ import annotations

import re

import pytest

from tests.browser_support import login
from tests.conftest import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_quality_report_and_cleaning_from_the_page(page, live_server, project, engineer, settings, monkeypatch,
                                                   shot):  # noqa: F811
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
    page.get_by_label(re.compile(f"{ARITHMETIC} v1")).check()  # the evaluation set
    page.click("#run-report")
    page.wait_for_selector("#report-bar")
    page.wait_for_function("document.getElementById('report-text').textContent.includes('Waiting for a worker')")
    shot(page, "queued")
    with page.expect_navigation():  # the page polls, and reloads once the worker is done
        report_run(report_id=QualityReport.objects.get().pk)
    page.wait_for_selector("#chart-task_types .main-svg")
    for key in ("task_types", "duplicates", "identical_pairs", "contamination", "length_bias", "languages"):
        assert page.locator(f"#q-{key}").is_visible()
    for chart in ("task_types", "duplicates", "length_bias", "languages"):
        assert page.locator(f"#chart-{chart} .barlayer .trace").count() == 1, chart
    warning = page.inner_text("#task-type-warning")
    assert "Reasoning: math is 100% of the rows" in warning  # the demo set is one kind of task
    page.click("#q-task_types summary")  # the rule is shown on demand
    assert "more than one user turn" in page.inner_text("#q-task_types details")
    contaminated = int(page.inner_text("#contaminated-rows"))
    assert contaminated == prefs.row_count  # every demo pair asks a question of the arithmetic set
    assert page.locator("#contaminated-table tbody tr").count() == contaminated
    exact = int(page.inner_text("#exact-dup-rows"))
    near = int(page.inner_text("#near-dup-rows"))
    assert exact > 0 and near >= exact
    shot(page, "report")

    # Clean: keep the contaminated rows this time (dropping them would leave nothing), drop the duplicates.
    page.get_by_role("checkbox", name=re.compile("overlap the evaluation sets")).uncheck()
    with page.expect_navigation(url="**/v2/"):
        page.click("#clean-submit")
    assert f"Created v2: {prefs.row_count - near:,} rows kept, {near:,} dropped" in page.inner_text(".messages")
    assert "cleaned from v1" in page.inner_text(".version-origin")
    new = DatasetVersion.objects.get(dataset=prefs.dataset, number=2)
    assert new.parent_id == prefs.pk and new.row_count == prefs.row_count - near
    assert page.locator("table tbody tr").count() == min(new.row_count, 50)
    shot(page, "cleaned")
    page.get_by_role("link", name=re.compile("quality report")).click()  # the lineage leads back to the report
    page.wait_for_url("**/v1/quality/?report=*")
    assert "v2" in page.inner_text("#derived-versions")
