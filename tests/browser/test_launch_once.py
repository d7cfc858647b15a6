"""A reviewed launch happens once: Back after Launch shows the review as launched, and posting it again
(no script, a double click, a second tab) shows the job it made instead of launching a duplicate."""
from __future__ import annotations

import re

import pytest

from tests.browser.browser_helpers import PASSWORD, seed_project
from tests.browser.test_run_page import launch_from_the_form
from tests.browser_support import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_back_after_launch_does_not_launch_again(page, live_server, project, engineer, tmp_path, shot):
    from webapp.runs.models import Job

    engineer.set_password(PASSWORD)
    engineer.save()
    seeded = seed_project(project, engineer, tmp_path)
    base = f"{live_server.url}/p/acme"
    login(page, live_server, engineer.username, PASSWORD)
    launch_from_the_form(page, base)
    job = Job.objects.exclude(pk=seeded.job.pk).get()

    page.go_back(wait_until="domcontentloaded")  # the review page again, as the browser kept it
    launched = page.locator("#review-launched")
    launched.wait_for()
    assert f"already launched as job #{job.pk}" in launched.inner_text()
    assert not page.get_by_role("button", name="Launch", exact=True).is_visible()
    assert not page.locator("#review-next").is_visible()  # no "it will be job #N" any more
    shot(page, "review-after-back")

    # the same review posted again (a page without its script, a second tab): the job it made, no new one
    page.evaluate("""() => { const f = document.getElementById('review-form');
        const a = document.createElement('input'); a.type = 'hidden'; a.name = 'action'; a.value = 'launch';
        f.appendChild(a); f.submit(); }""")
    page.wait_for_selector("#already-launched")
    assert page.locator("h1").inner_text() == "Already launched"
    assert Job.objects.exclude(pk=seeded.job.pk).count() == 1
    shot(page, "already-launched")
    page.get_by_role("link", name=f"Open job #{job.pk}").click()
    page.wait_for_url(re.compile(rf"/jobs/{job.pk}/(#\w+)?$"), wait_until="domcontentloaded")

    # a deliberate second launch goes through a new review
    page.go_back(wait_until="domcontentloaded")
    page.get_by_role("button", name="Review it again to launch another job").click()
    page.wait_for_selector("text=Review before launch")
    assert page.get_by_role("button", name="Launch", exact=True).is_visible()
    page.get_by_role("button", name="Launch", exact=True).click()
    page.wait_for_url(re.compile(r"/jobs/\d+/(#\w+)?$"), wait_until="domcontentloaded")
    assert Job.objects.exclude(pk=seeded.job.pk).count() == 2
