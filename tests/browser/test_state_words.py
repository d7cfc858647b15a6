"""In the browser: the review counter and its progress bar agree; the launch review names one job id."""
from __future__ import annotations

import re

import pytest

from tests.browser.browser_helpers import PASSWORD, seed_project
from tests.browser_support import login
from tests.webapp.review.conftest import make_version

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_review_counter_and_bar_agree(page, live_server, project, reviewer, shot):
    reviewer.set_password(PASSWORD)
    reviewer.save()
    version = make_version(project, name="prefs", rows=4)
    login(page, live_server, reviewer.username, PASSWORD)
    page.goto(f"{live_server.url}/p/acme/review/v/{version.pk}/")
    page.wait_for_selector("#rv-item:not([hidden])")
    # the bar reads the words beside it (the dataset's decided pairs), not the reviewer's own counter
    bar = page.get_by_role("progressbar", name="Dataset: 0 of 4 pairs decided", exact=False)
    assert bar.get_attribute("aria-valuenow") == "0"
    page.keyboard.press("a")
    page.wait_for_function("document.getElementById('rv-progress').textContent.startsWith('1 done')")
    bar = page.get_by_role("progressbar", name="Dataset: 1 of 4 pairs decided · 0 conflicts · 0 flagged")
    assert bar.get_attribute("aria-valuenow") == "25"
    assert page.evaluate("document.getElementById('rv-bar').style.width") == "25%"
    shot(page, "one-of-four")


def test_launch_review_names_one_job_id(page, live_server, project, engineer, tmp_path, shot):
    from webapp.runs.models import Job

    engineer.set_password(PASSWORD)
    engineer.save()
    seed_project(project, engineer, tmp_path)
    expected = Job.objects.order_by("-pk").first().pk + 1
    login(page, live_server, engineer.username, PASSWORD)
    page.goto(f"{live_server.url}/p/acme/jobs/new/")
    page.get_by_role("button", name="Review the configuration").click()
    page.wait_for_selector("#review-job-id")
    assert page.locator("#review-job-id").inner_text() == f"#{expected}"
    config = page.locator("pre").first.inner_text()
    command = page.locator("#command").inner_text()
    assert re.search(rf"job_id: '?{expected}'?", config), config[:400]
    run_dir = page.locator("main p").nth(1).locator("code").last.inner_text()
    assert run_dir in command  # the same run, in the words and in the command
    shot(page, "launch-review")
