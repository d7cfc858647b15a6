"""An engineer turns on the KL-spike rule with a restore on a new seed and the garbled-output rule on the New job
form; the run page lists both rules as the run will apply them and draws the garbled-output shares."""
from __future__ import annotations

import re

import pytest

from tests.browser.browser_helpers import open_new_job_form
from training.guard_rules import parse_rules

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_add_the_spike_and_garbled_rules_and_see_them_on_the_run_page(page, live_server, project, engineer,
                                                                      tmp_path):
    from webapp.runs.models import Job, MetricPoint

    seeded = open_new_job_form(page, live_server, project, engineer, tmp_path)
    page.get_by_label("Save a checkpoint every N steps").fill("5")
    rules = page.locator("#guard-rules-card")
    assert not rules.get_by_label("kl_spike", exact=True).is_checked()
    rules.get_by_label("kl_spike", exact=True).check()
    rules.get_by_label("kl_spike threshold").fill("4")
    rules.get_by_label("kl_spike action").select_option("restore")
    rules.get_by_label("kl_spike: on restore, lr ×").fill("")
    rules.get_by_label("kl_spike: on restore, new seed").check()
    rules.get_by_label("garbled_output", exact=True).check()
    rules.get_by_label("garbled_output threshold").fill("0.3")
    page.wait_for_selector("#preview-status:has-text('Ready to launch')")
    page.get_by_role("button", name="Launch without review").click()
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))

    job = Job.objects.exclude(pk=seeded.job.pk).get(project=project)
    by_name = {r.name: r for r in parse_rules(job.config["guard_rules"])}
    spike = by_name["kl_spike"]
    assert (spike.threshold, spike.action, spike.new_seed, spike.lr_factor) == (4.0, "restore", True, None)
    assert by_name["garbled_output"].threshold == 0.3

    # what ingest writes from the run's rollouts: the page draws them
    for step, share in ((1, 0.0), (2, 0.25), (3, 0.5)):
        MetricPoint.objects.create(job=job, name="garbled/share", step=step, value=share, wall_time=step)
        MetricPoint.objects.create(job=job, name="garbled/repetition_share", step=step, value=share, wall_time=step)
    page.reload()
    page.get_by_role("tab", name=re.compile("History")).click()
    summary = page.locator('[data-rule-summary="kl_spike"]')
    summary.wait_for()
    assert "4 standard deviations above its last 20 values" in summary.inner_text()
    assert "restore (new seed, at most 2×)" in summary.inner_text()
    assert "garbled/share above 0.3" in page.locator('[data-rule-summary="garbled_output"]').inner_text()
    page.get_by_role("tab", name="Curves").click()
    page.get_by_text("Garbled output (share of responses)").wait_for()
