"""The New job form shows the preset's health rules; an engineer turns one off, changes a threshold and an
action, and the launched job carries exactly those rules."""
from __future__ import annotations

import re

import pytest

from tests.browser.browser_helpers import PASSWORD, open_new_job_form, seed_project
from tests.browser_support import login
from training.guard_rules import parse_rules

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_edit_the_presets_health_rules_before_launch(page, live_server, project, engineer, tmp_path):
    from webapp.runs.models import Job

    engineer.set_password(PASSWORD)
    engineer.save()
    seeded = seed_project(project, engineer, tmp_path)
    login(page, live_server, engineer.username, PASSWORD)
    page.goto(f"{live_server.url}/p/{project.slug}/jobs/new/")
    rules = page.locator("#guard-rules-card")
    assert not rules.get_by_label("kl", exact=True).is_checked()  # demo-cpu declares no rules
    page.get_by_label("Preset").select_option("demo-cpu-guarded")  # the script fills them from the preset
    assert rules.get_by_label("kl", exact=True).is_checked()
    assert rules.get_by_label("kl threshold").input_value() == "0.3"
    assert rules.get_by_label("kl action").input_value() == "restore"
    assert rules.get_by_label("entropy_collapse", exact=True).is_checked()

    rules.get_by_label("entropy_collapse", exact=True).uncheck()
    rules.get_by_label("kl threshold").fill("0.5")
    rules.get_by_label("response_clipping action").select_option("stop")
    for label, text in (("Dataset version", "sum-prompts"), ("Base model", "tiny")):
        select = page.get_by_label(label)
        select.select_option(value=select.locator("option", has_text=text).first.get_attribute("value"))
    page.get_by_label("exact-match weight").fill("1")
    page.wait_for_selector("#preview-status:has-text('Ready to launch')")
    page.get_by_role("button", name="Review the configuration").click()
    page.wait_for_selector("text=Review before launch")
    page.get_by_role("button", name="Launch", exact=True).click()
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))

    job = Job.objects.exclude(pk=seeded.job.pk).get(project=project)
    by_name = {r["rule"]: r for r in job.config["guard_rules"]}
    assert "entropy_collapse" not in by_name
    assert by_name["kl"] == {"rule": "kl", "threshold": 0.5, "patience": 3, "action": "restore", "lr_factor": 0.5,
                             "max_restores": 2}  # the preset's other fields stay
    assert by_name["response_clipping"]["action"] == "stop"
    assert set(by_name) == {"kl", "zero_variance_groups", "response_clipping", "grad_norm_spike", "reward_hacking"}


def test_turn_the_kl_guard_on_with_its_restore_settings(page, live_server, project, engineer, tmp_path):
    """The KL guard is the rule "kl" of the same table: on, its patience, KL-coefficient factor and restore cap
    typed in its row; a restore without checkpoints is refused on the rule's action."""
    from webapp.runs.models import Job

    seeded = open_new_job_form(page, live_server, project, engineer, tmp_path)
    rules = page.locator("#guard-rules-card")
    assert rules.get_by_label("kl threshold").input_value() == "2.0"  # demo-cpu: off, its line at 2
    rules.get_by_label("kl", exact=True).check()
    rules.get_by_label("kl threshold").fill("0.5")
    rules.get_by_label("kl patience (steps)").fill("2")
    rules.get_by_label("kl: on restore, KL coefficient ×").fill("2")
    rules.get_by_label("kl: restores at most").fill("1")
    page.get_by_label("Save a checkpoint every N steps").fill("0")
    rules.locator(".field-error", has_text="saves none").wait_for()
    page.get_by_label("Save a checkpoint every N steps").fill("20")
    page.wait_for_selector("#preview-status:has-text('Ready to launch')")
    page.get_by_role("button", name="Launch without review").click()
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))

    job = Job.objects.exclude(pk=seeded.job.pk).get(project=project)
    (kl,) = parse_rules(job.config["guard_rules"])
    assert (kl.name, kl.enabled, kl.threshold, kl.patience, kl.action) == ("kl", True, 0.5, 2, "restore")
    assert (kl.lr_factor, kl.kl_coef_factor, kl.max_restores) == (0.5, 2.0, 1)  # lr × 0.5 as the row showed
    assert "kl_guard" not in job.config
