"""The job form's first round of errors shows every problem at once: a missing dataset does not hide a batch
size of 0 or a missing reward (the issue: fix one error, submit, find the next)."""
from __future__ import annotations

import pytest

from tests.browser.browser_helpers import PASSWORD, seed_project
from tests.browser_support import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_every_error_of_the_form_shows_in_the_first_round(page, live_server, project, engineer, tmp_path, shot):
    from webapp.runs.models import Job

    engineer.set_password(PASSWORD)
    engineer.save()
    seed_project(project, engineer, tmp_path)
    login(page, live_server, engineer.username, PASSWORD)
    page.goto(f"{live_server.url}/p/acme/jobs/new/")
    page.get_by_label("Dataset version").select_option(value="")  # forgotten
    page.get_by_label("exact-match weight").fill("")  # no reward
    page.get_by_label("Batch size (prompts per step)").fill("0")
    page.get_by_role("button", name="Review the configuration").click()
    page.wait_for_load_state("domcontentloaded")

    def error_of(label: str):
        field = page.locator(".field").filter(has=page.get_by_label(label, exact=True))
        return field.locator(".field-error").first

    assert "required" in error_of("Dataset version").inner_text()
    assert "Batch size (prompts per step) must be between 1" in error_of("Batch size (prompts per step)").inner_text()
    assert "GRPO needs a reward" in page.locator("#reward-card").inner_text()
    assert Job.objects.count() == 1  # the seeded run only
    shot(page, "all-errors")
