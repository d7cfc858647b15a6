"""In the browser: the review counter and its progress bar agree; the launch review names one job id."""
from __future__ import annotations

import json
import re

import pytest

from tests.browser.browser_helpers import PASSWORD, seed_project
from tests.browser_support import login, start_test_run
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
    page.keyboard.press("l")  # the labels first: then "a" approves as labelled
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


def test_test_run_words_errors_reference_check_and_rollouts(page, live_server, project, engineer, tmp_path, shot,
                                                            celery_worker_proc):  # test-runs run on a worker
    """A test-run whose samples raised says "N errors", not succeeded; a prompt set without responses says it
    is a reference check and offers a run's stored rollouts, which then get scored."""
    from training.rundir import RunDir

    engineer.set_password(PASSWORD)
    engineer.save()
    seeded = seed_project(project, engineer, tmp_path)
    rollouts = RunDir(seeded.job.run_dir).samples("rollout", 20)
    rollouts.parent.mkdir(parents=True)
    rollouts.write_text("".join(json.dumps(r) + "\n" for r in [
        {"input": "1+2=", "output": "3", "gts": "3", "score": 1.0, "step": 20},
        {"input": "2+5=", "output": "8", "gts": "7", "score": 0.0, "step": 20}]))
    login(page, live_server, engineer.username, PASSWORD)
    reward_page = f"{live_server.url}/p/{project.slug}/rewards/{seeded.reward.pk}/"
    page.goto(reward_page)
    page.wait_for_selector(".CodeMirror .CodeMirror-linenumber")

    # pasted answers the (unsaved) code cannot parse: the badge counts the errors
    page.evaluate("(t) => document.querySelector('.CodeMirror').CodeMirror.setValue(t)",
                  "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"
                  "    return float(int(solution_str) == int(ground_truth))\n")
    choose = page.get_by_label("Dataset version")
    choose.select_option(value=choose.locator("option", has_text="sum-prompts").first.get_attribute("value"))
    page.fill("#id_responses", "x\n12\ny")  # scored against the first three rows' ground truths
    start_test_run(page)
    page.wait_for_selector(".test-run-results .per-sample")
    assert page.locator(".test-run-results h2 .state").first.inner_text() == "2 errors"
    assert "2 errors" in page.locator("#test-run-status").inner_text()
    assert "succeeded" not in page.locator(".test-run-results h2").inner_text()
    shot(page, "test-run-2-errors")

    # the saved reward on a prompt set without responses: a reference check, said in words
    page.goto(reward_page)
    choose = page.get_by_label("Dataset version")
    choose.select_option(value=choose.locator("option", has_text="sum-prompts").first.get_attribute("value"))
    page.get_by_label("Samples (N)").fill("3")
    start_test_run(page)
    page.wait_for_selector(".test-run-results .reference-check")
    assert page.locator(".test-run-results h2").inner_text().endswith("succeeded reference check")
    assert "ground truth was scored against itself" in page.locator(".reference-check").inner_text()
    assert "reference check" in page.locator("#test-run-status").inner_text()

    # its offer: score the stored rollouts of a run instead
    page.locator(".reference-check a[data-offer='rollouts']").click()
    page.wait_for_selector("#test-run-sources.highlighted")
    run_select = page.get_by_label("Stored rollouts of run")
    run_select.select_option(value=str(seeded.job.pk))
    start_test_run(page)
    page.wait_for_selector(".test-run-results .per-sample")
    results = page.locator(".test-run-results")
    assert "rollouts of step 20" in results.inner_text() and "Score in training" in results.inner_text()
    assert results.locator(".reference-check").count() == 0
    scores = [r.locator("td").nth(4).inner_text() for r in results.locator(".per-sample tbody tr").all()]
    assert scores == ["1.0000", "0.0000"]
    shot(page, "test-run-rollouts")

    # or: the answers a registered model gives to the prompt set's first prompts
    page.goto(reward_page + "?source=model#test-run-panel")
    choose = page.get_by_label("Dataset version")
    choose.select_option(value=choose.locator("option", has_text="sum-prompts").first.get_attribute("value"))
    page.get_by_label("Samples (N)").fill("2")
    page.get_by_label("Or responses sampled from model").select_option(label="tiny")
    start_test_run(page)
    page.wait_for_selector(".test-run-results .per-sample")
    results = page.locator(".test-run-results")
    assert "2 responses sampled from tiny" in results.inner_text()
    assert results.locator(".per-sample tbody tr").count() == 2 and results.locator(".reference-check").count() == 0
    assert all(r.locator("small.muted").first.inner_text() == "sampled"
               for r in results.locator(".per-sample tbody tr").all())
