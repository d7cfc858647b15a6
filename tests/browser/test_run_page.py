"""One run page: launch lands on it, and everything a run has is there — curves, checkpoints (rollback,
lineage), samples, compare, re-score, the log, attempts and settings. The old monitor address leads to it."""
from __future__ import annotations

import re

import pytest

from tests.browser.browser_helpers import PASSWORD, seed_project
from tests.browser_support import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def seeded(project, engineer, tmp_path):
    engineer.set_password(PASSWORD)
    engineer.save()
    return seed_project(project, engineer, tmp_path)


def launch_from_the_form(page, base: str) -> None:
    page.goto(f"{base}/jobs/new/")
    for label, text in (("Dataset version", "sum-prompts"), ("Base model", "tiny")):
        select = page.get_by_label(label)
        select.select_option(value=select.locator("option", has_text=text).first.get_attribute("value"))
    page.get_by_label("exact-match weight").fill("1")
    page.wait_for_selector("#preview-status:has-text('Ready to launch')")
    page.get_by_role("button", name="Review the configuration").click()
    page.wait_for_selector("text=Review before launch")
    page.get_by_role("button", name="Launch", exact=True).click()
    page.wait_for_url(re.compile(r"/jobs/\d+/(#\w+)?$"), wait_until="domcontentloaded")


def test_launch_lands_on_the_run_page_that_has_compare_rescore_and_everything_else(page, live_server, engineer,
                                                                                   seeded, shot):
    from webapp.runs.models import Job

    base = f"{live_server.url}/p/acme"
    login(page, live_server, engineer.username, PASSWORD)
    launch_from_the_form(page, base)
    launched = Job.objects.exclude(pk=seeded.job.pk).get()
    assert page.url.split("#")[0] == f"{base}/jobs/{launched.pk}/"
    for tab in ("Curves", re.compile(r"Checkpoints \(\d+\)"), "Samples", re.compile(r"History")):
        assert page.get_by_role("tab", name=tab).count() == 1
    nav = page.get_by_role("navigation", name="This run")
    for link in ("Compare with other runs", "Re-score stored samples", "Live log", "Settings", "Attempts and events"):
        assert nav.get_by_role("link", name=link).is_visible(), link
    shot(page, "launched-run-page")

    # compare this run with the seeded one, starting from the run page
    nav.get_by_role("link", name="Compare with other runs").click()
    page.wait_for_url(re.compile(rf"/monitor/compare/\?jobs={launched.pk}$"))
    assert page.get_by_role("checkbox", name=re.compile(f"#{launched.pk}")).is_checked()
    page.get_by_role("checkbox", name=re.compile(f"#{seeded.job.pk}")).check()
    page.get_by_role("button", name="Update").click()
    page.wait_for_url(re.compile(rf"jobs={launched.pk}&jobs={seeded.job.pk}|jobs={seeded.job.pk}&jobs={launched.pk}"))
    assert "Pick a second run" not in page.locator("#compare-diff").inner_text()

    # the finished run, reached from the Jobs list: re-score, then the checkpoint's rollback and lineage tab
    page.goto(f"{base}/jobs/")
    page.get_by_role("link", name=f"#{seeded.job.pk} {seeded.job.name}").click()
    page.wait_for_url(re.compile(rf"/p/acme/jobs/{seeded.job.pk}/(#\w+)?$"))
    page.get_by_role("navigation", name="This run").get_by_role("link", name="Re-score stored samples").click()
    page.wait_for_url(f"{base}/jobs/{seeded.job.pk}/rescores/")
    page.get_by_role("link", name=re.compile(rf"#{seeded.job.pk} ")).first.click()  # its back link
    page.wait_for_url(re.compile(rf"/p/acme/jobs/{seeded.job.pk}/(#\w+)?$"))

    # the old address (bookmarks, notifications of older versions) opens the same page, on the asked tab
    page.goto(f"{base}/monitor/jobs/{seeded.job.pk}/#checkpoints")
    page.wait_for_url(f"{base}/jobs/{seeded.job.pk}/#checkpoints")
    assert page.get_by_role("tab", name=re.compile("Checkpoints")).get_attribute("aria-selected") == "true"
    assert page.locator("table.mon-ckpts").get_by_role("link", name="Roll back").count() == 1
    # the samples page's way back leads to this page too
    page.get_by_role("tab", name="Samples").click()
    page.get_by_role("link", name="Open on its own page").click()
    page.get_by_role("link", name="Back to the run").click()
    page.wait_for_url(f"{base}/jobs/{seeded.job.pk}/#samples")
    assert page.get_by_role("tab", name="Samples").get_attribute("aria-selected") == "true"
    shot(page, "samples-tab")
