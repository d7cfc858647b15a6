"""In the browser: save a reward in the editor, its failing probes appear next to the code (run on a worker),
the launch is refused, an engineer overrides with a reason, and the launch review then goes through."""
from __future__ import annotations

import re

import pytest

from tests.browser.browser_helpers import PASSWORD, seed_project
from tests.browser_support import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ALWAYS_ONE = "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n    return 1.0\n"


def fill_job_form(page, live_server, project) -> None:
    page.goto(f"{live_server.url}/p/{project.slug}/jobs/new/")
    for label, text in (("Dataset version", "sum-prompts"), ("Base model", "tiny")):
        select = page.get_by_label(label)
        select.select_option(value=select.locator("option", has_text=text).first.get_attribute("value"))
    page.get_by_label("exact-match weight").fill("")
    page.get_by_label("always-one weight").fill("1")


def test_failing_probes_block_the_launch_until_overridden(page, live_server, project, engineer, tmp_path, shot,
                                                          celery_worker_proc):  # probes run on a worker
    from webapp.core.models import AuditLog

    engineer.set_password(PASSWORD)
    engineer.save()
    seed_project(project, engineer, tmp_path)
    login(page, live_server, engineer.username, PASSWORD)

    page.goto(f"{live_server.url}/p/{project.slug}/rewards/new/")
    page.wait_for_selector(".CodeMirror .CodeMirror-linenumber")
    page.fill("#id_name", "always-one")
    page.evaluate("(t) => document.querySelector('.CodeMirror').CodeMirror.setValue(t)", ALWAYS_ONE)
    page.click("button:has-text('Create version 1')")
    page.wait_for_url(re.compile(r"/rewards/\d+/$"))
    reward_url = page.url

    # the worker's verdicts replace "probes pending" in place, next to the editor
    panel = page.locator(".editor-grid #probes")
    panel.locator("[data-probe='builtin:empty'].probe-failing").wait_for()
    assert panel.locator("#probe-state").inner_text() == "7 failing probes"
    assert page.locator("[data-version-probes='1']").inner_text() == "7 failing probes"  # the versions list too
    empty = panel.locator("[data-probe='builtin:empty']").inner_text()
    assert "empty answer" in empty and "1.0000" in empty and "built-in probes must score below 0.5" in empty
    assert "the built-in probes must score below 0.5" in panel.inner_text()
    shot(page, "failing-probes")

    # the launch is refused, saying which probes fail and where to override them
    fill_job_form(page, live_server, project)
    assert page.get_by_role("link", name="v1: 7 failing probes").count() == 1  # said beside the reward's weight
    page.get_by_role("button", name="Review the configuration").click()
    refusal = page.get_by_text(re.compile(r"always-one v1 fails 7 probes \(empty answer: scored 1"))
    refusal.first.wait_for()
    assert "override" in refusal.first.inner_text()
    assert page.get_by_text("Review before launch").count() == 0
    shot(page, "launch-refused")

    # an engineer overrides with a reason: audited and shown next to the probes
    page.goto(reward_url)
    page.get_by_label("Why may this version launch despite its failing probes?").fill(
        "constant reward for a KL-only smoke test")
    page.get_by_role("button", name="Override the failing probes").click()
    page.wait_for_selector(".probe-override")
    assert "constant reward for a KL-only smoke test" in page.locator(".probe-override").inner_text()
    assert page.locator("#probe-state").inner_text() == "7 failing probes, overridden"
    assert AuditLog.objects.filter(action="reward.probe_override", actor=engineer).count() == 1

    fill_job_form(page, live_server, project)
    page.wait_for_selector("#preview-status:has-text('Ready to launch')")
    page.get_by_role("button", name="Review the configuration").click()
    page.wait_for_selector("text=Review before launch")
    assert "overridden by erin: constant reward for a KL-only smoke test" in page.locator("main").inner_text()
    shot(page, "launch-review-with-override")

    # the author's own probe and the score scale, from the same panel; each change runs the probes again
    page.goto(reward_url)
    page.locator("#probes summary", has_text="Your probes").click()
    page.get_by_label("Probe name").fill("right answer pays")
    page.get_by_label("Response (solution_str)").fill("#### 72")
    page.get_by_label("Ground truth").fill("72")
    page.get_by_label("Lowest expected score (lo)").fill("1")
    page.get_by_role("button", name="Add probe").click()
    page.wait_for_selector("text=Added the probe right answer pays")
    mine = page.locator("#probes [data-probe^='author:']")
    mine.wait_for()  # followed until the worker has run the new suite
    assert "passes" in mine.inner_text() and "score at least 1" in mine.inner_text()
    assert page.locator("#probe-state").inner_text() == "7 failing probes"  # a new suite: the override was for the old
    page.locator("#probes summary", has_text="Your probes").click()
    page.get_by_label("Score scale").select_option("custom")
    page.get_by_label("Threshold (another scale)").fill("1")
    page.get_by_role("button", name="Set the scale").click()
    page.wait_for_selector("text=The built-in probes must now score at most 1")
    page.wait_for_selector("#probe-state:has-text('probes passed')")
    shot(page, "probes-on-a-custom-scale")
