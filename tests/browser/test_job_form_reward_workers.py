"""The New job form offers the reward scoring budget (hp.reward_workers): a bad value is refused on its field,
a good one reaches the launched job."""
from __future__ import annotations

import re

import pytest

from tests.browser.browser_helpers import open_new_job_form

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_set_the_reward_scoring_processes_on_the_job_form(page, live_server, project, engineer, tmp_path):
    from webapp.runs.models import Job

    seeded = open_new_job_form(page, live_server, project, engineer, tmp_path)
    field = page.get_by_label("Reward scoring processes")
    assert field.input_value() == ""  # blank: min(CPU cores, 4)
    field.fill("0")
    page.wait_for_selector("text=Reward scoring processes must be between 1 and 64")
    field.fill("3")
    page.wait_for_selector("#preview-status:has-text('Ready to launch')")
    page.get_by_role("button", name="Review the configuration").click()
    page.wait_for_selector("text=Review before launch")
    page.get_by_role("button", name="Launch", exact=True).click()
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))

    job = Job.objects.exclude(pk=seeded.job.pk).get(project=project)
    assert job.config["hp"]["reward_workers"] == 3
