"""Batch size 0 on the New job form: the live check and the review step both say so on the field (it used to be
an HTTP 500 in both), and nothing is launched."""
from __future__ import annotations

import pytest

from tests.browser.browser_helpers import open_new_job_form

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_batch_size_zero_is_refused_on_its_field(page, live_server, project, engineer, tmp_path):
    from webapp.runs.models import Job

    seeded = open_new_job_form(page, live_server, project, engineer, tmp_path)
    page.wait_for_selector("#preview-status:has-text('Ready to launch')")

    page.get_by_label("Batch size (prompts per step)").fill("0")
    field = page.locator(".field", has=page.locator("#id_batch_size"))
    field.locator(".field-error", has_text="must be between 1 and").wait_for()
    page.get_by_role("button", name="Review the configuration").click()
    page.wait_for_load_state()
    error = page.locator("#id_batch_size-error")
    error.wait_for()
    assert "Batch size (prompts per step) must be between 1 and 65536, got 0." in error.inner_text()
    assert page.get_by_label("Batch size (prompts per step)").input_value() == "0"  # what was typed stays
    assert not Job.objects.filter(project=project).exclude(pk=seeded.job.pk).exists()
