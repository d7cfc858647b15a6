"""The README's five-minute walkthrough, step by step, as a new user follows it in Chromium: on the seeded demo
project (`manage.py seed_demo`, logged in as admin / admin), with a real Celery worker and beat.

Datasets (stats, quality report, the cleaned version) → Review with the keyboard → the reward's test-run → New job,
its review with the length pre-flight, Launch → the run page: the reward curve growing live, the checkpoints, a
re-score of the stored samples, a rollback and its child run, Compare with other runs → Arena between two
checkpoints on demo-arithmetic's prompts, judged blind, closed → an automatic judge (the run's reward) on it.
The run is kept short (30 steps) so the whole walk takes minutes; every wait is on what the page shows."""
from __future__ import annotations

import re

import pytest

from tests.browser.test_golden_path import REWARD_FIRST_STEP_JS, REWARD_POINTS_JS, job_id_of
from tests.browser_support import login, start_test_run

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

MAX_STEPS, SAVE_FREQ = 30, 10
WORKER_MS = 240_000  # a worker on a loaded 2-core machine: torch alone can take 20 s to start


@pytest.fixture
def demo_project(settings):
    """What `./run` seeds: the admin login, the demo project, its datasets, reward, models and review queues."""
    import torch

    from webapp.overview import demo

    torch.set_num_threads(1)
    return demo.seed(log=lambda _msg: None)


def pick(select, *parts: str) -> None:
    """Choose the option of a <select> whose text contains every one of `parts`."""
    # The select may still be on its way (a click on a link returns before the next page loads): wait for it, then
    # read texts and values at once, so both come from the same page.
    select.wait_for()
    options = select.locator("option").evaluate_all("os => os.map(o => [o.textContent, o.value])")
    [value] = [v for t, v in options if all(p in t for p in parts)]
    select.select_option(value=value)


def nav(page, name: str) -> None:
    # a click returns before the next page has loaded: what is read next must come from the new page
    with page.expect_navigation():
        page.get_by_role("navigation", name="Project").get_by_role("link", name=name).click()


def test_the_readme_walkthrough(page, live_server, demo_project, celery_worker_proc, celery_beat_proc, stop_runs,
                                shot):
    from playwright.sync_api import expect

    from webapp.datasets.models import DatasetVersion
    from webapp.monitoring.models import BlindTask
    from webapp.runs.models import Job, Rescore

    # 1. log in as the README says and open the demo project
    login(page, live_server, "admin", "admin")
    page.goto(f"{live_server.url}/p/demo/")
    base = f"{live_server.url}/p/demo"
    assert page.locator("h1").inner_text() == "Demo"

    # 2. datasets: both demo sets are there; the preferences' stats page, then its quality report against the
    #    arithmetic prompts and the cleaned version with the form's defaults
    nav(page, "Datasets")
    expect(page.get_by_role("link", name="demo-arithmetic")).to_be_visible()
    page.get_by_role("link", name="demo-preferences").click()
    page.get_by_role("link", name="Stats").click()
    page.wait_for_selector(".chart[data-figure] .main-svg")  # a length histogram drawn
    prefs = DatasetVersion.objects.get(dataset__project=demo_project, dataset__name="demo-preferences")
    page.get_by_role("link", name="Quality").click()
    page.get_by_label(re.compile("demo-arithmetic v1")).check()
    page.click("#run-report")
    page.wait_for_selector("#clean-form", timeout=WORKER_MS)  # the worker's report; the page reloads itself
    main = page.locator("main").inner_text()
    assert "Near-duplicates" in main or "near-duplicate" in main
    shot(page, "quality-report")
    with page.expect_navigation(url="**/v2/"):
        page.click("#clean-submit")
    v2 = DatasetVersion.objects.get(dataset=prefs.dataset, number=2)
    assert 0 < v2.row_count < prefs.row_count
    assert f"{v2.row_count:,} rows kept" in page.inner_text(".messages")

    # 3. review demo-preferences with the keyboard, without a page load between decisions
    nav(page, "Review")
    page.get_by_role("row", name=re.compile(r"demo-preferences v1")).get_by_role("link", name="Review").click()
    page.wait_for_selector("#rv-item:not([hidden])")
    page.evaluate("window.__sameDocument = true")
    page.keyboard.press("l")  # the dataset's labels, which "approve as labelled" needs
    for key, index in (("1", "1"), ("2", "2"), ("a", "3")):
        page.keyboard.press(key)
        expect(page.locator("#rv-index")).to_have_text(index)
    assert page.locator("#rv-progress").inner_text().startswith("3 done")
    assert page.evaluate("window.__sameDocument") is True

    # 4. the reward: exact-match's test-run on 100 samples of demo-arithmetic
    nav(page, "Reward functions")
    page.get_by_role("link", name="exact-match").first.click()
    pick(page.get_by_label("Dataset version"), "demo-arithmetic v1")
    page.get_by_label("Samples (N)").fill("100")
    start_test_run(page)
    page.wait_for_selector(".test-run-results .per-sample", timeout=WORKER_MS)
    # the demo set has fewer rows than the README's 100: all are scored, and the page says why not 100
    rows = DatasetVersion.objects.get(dataset__project=demo_project, dataset__name="demo-arithmetic").row_count
    assert rows < 100
    expect(page.locator("#test-run-status")).to_contain_text(f"Done: {rows} samples")
    expect(page.locator("#test-run-status")).to_contain_text("every row there is: 100 were asked")
    shot(page, "reward-test-run")

    # 5. New job: demo-cpu, GRPO, demo-arithmetic, demo-tiny, exact-match weight 1 (and a short run)
    nav(page, "Jobs")
    page.get_by_role("link", name="New job").click()
    assert page.get_by_label("Preset").input_value() == "demo-cpu"
    assert page.get_by_label("Kind").input_value() == "grpo"
    pick(page.get_by_label("Dataset version"), "demo-arithmetic v1")
    pick(page.get_by_label("Base model"), "demo-tiny")
    page.get_by_label("exact-match weight").fill("1")
    page.get_by_label("Max steps").fill(str(MAX_STEPS))
    page.get_by_label("Save a checkpoint every N steps").fill(str(SAVE_FREQ))
    page.get_by_label("Validate every N steps").fill(str(SAVE_FREQ))
    page.wait_for_selector("#preview-status:has-text('Ready to launch')")
    page.get_by_role("button", name="Review the configuration").click()
    page.wait_for_selector("text=Review before launch")
    expect(page.locator("#lengths-budget")).to_be_visible()  # the length pre-flight
    shot(page, "launch-review")
    page.get_by_role("button", name="Launch", exact=True).click()
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))

    # 6. the run page: one page with everything; the reward curve fills in live
    run = Job.objects.get(project=demo_project)
    assert page.url.split("#")[0] == f"{base}/jobs/{run.pk}/"
    run_nav = page.get_by_role("navigation", name="This run")
    for link in ("Compare with other runs", "Re-score stored samples"):
        expect(run_nav.get_by_role("link", name=link)).to_be_visible()
    # Every step reaches the chart without a reload. (Whether the first points show before the toy's last step
    # depends on the machine's speed; new points joining a drawn chart are tested in test_monitoring_browser.)
    page.evaluate("window.__sameDocument = true")
    page.wait_for_function(f"({REWARD_POINTS_JS})() >= {MAX_STEPS}", timeout=WORKER_MS)
    assert page.evaluate("window.__sameDocument") is True
    page.wait_for_selector("#job-state:has-text('succeeded')", timeout=WORKER_MS)
    page.get_by_role("button", name="Cancel", exact=True).wait_for(state="detached")
    page.get_by_role("tab", name=re.compile(r"Checkpoints \([1-9]")).wait_for()
    shot(page, "run-finished")

    # 7. re-score the stored samples with exact-match (no generation): old vs new per sample
    page.get_by_role("navigation", name="This run").get_by_role("link", name="Re-score stored samples").click()
    pick(page.get_by_label("Reward version"), "exact-match v1")
    page.get_by_role("button", name="Re-score").click()
    expect(page.locator("#rescore-state")).to_have_text("succeeded", timeout=WORKER_MS)
    rescore = Rescore.objects.get(job=run)
    assert rescore.done_count == rescore.sample_count > 0
    expect(page.locator("#rescore-changed")).to_contain_text("of the samples changed")
    assert page.locator("#rescore-samples tbody tr").count() > 0
    shot(page, "rescore")

    # 8. checkpoints 10, 20, 30: roll back to the first; a child run continues from there
    page.goto(f"{base}/jobs/{run.pk}/")
    page.get_by_role("tab", name=re.compile("Checkpoints")).click()
    step_cell = page.locator("th", has_text=re.compile(rf"^{SAVE_FREQ}$"))
    row = page.locator("table.mon-ckpts tbody tr").filter(has=step_cell)
    row.get_by_role("link", name="Roll back").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("Reason").fill("walkthrough: from the first checkpoint")
    dialog.get_by_role("button", name="Roll back").click()
    page.wait_for_url(lambda url: job_id_of(url) not in (None, run.pk))
    child = Job.objects.get(parent=run)
    assert f"rolled back from #{run.pk} at step {SAVE_FREQ}" in page.locator("main").inner_text()
    page.wait_for_selector("#job-state:has-text('succeeded')", timeout=WORKER_MS)
    # the page reloads itself once the run ends: the reload has happened once Cancel is gone
    page.get_by_role("button", name="Cancel", exact=True).wait_for(state="detached")
    page.wait_for_function(f"({REWARD_FIRST_STEP_JS})() === {SAVE_FREQ + 1}")  # continues at 11

    # Compare with other runs: the parent and its child, the settings that differ named
    page.get_by_role("navigation", name="This run").get_by_role("link", name="Compare with other runs").click()
    page.wait_for_url(re.compile(rf"/monitor/compare/\?jobs={child.pk}$"))
    page.get_by_role("checkbox", name=re.compile(f"#{run.pk} ")).check()
    page.get_by_role("button", name="Update").click()
    page.wait_for_selector("#compare-chart .legendtext")
    legends = page.evaluate("[...document.querySelectorAll('#compare-chart .legendtext')].map(t => t.textContent)")
    assert any(t.startswith(f"#{run.pk} ") for t in legends) and any(t.startswith(f"#{child.pk} ") for t in legends)
    assert "Pick a second run" not in page.locator("#compare-diff").inner_text()
    shot(page, "compare")

    # 9. Arena: step 10 against step 30 of the run, on demo-arithmetic's prompts (their ground truth kept)
    nav(page, "Arena")
    pick(page.get_by_label("Side A"), f"#{run.pk}", "step 10")
    pick(page.get_by_label("Side B"), f"#{run.pk}", "step 30")
    page.get_by_label("From a dataset version").check()
    pick(page.get_by_label("Dataset version", exact=True), "demo-arithmetic v1")
    page.get_by_label("Split").select_option("all")  # the held-out rows are few in the demo set
    page.get_by_label("How many prompts").fill("10")
    page.get_by_label("Max response length (tokens)").fill("4")
    page.get_by_role("button", name="Start the arena").click()
    page.wait_for_url(re.compile(r"/monitor/blind/\d+/$"))
    judge_link = page.get_by_role("link", name=re.compile(r"^Judge"))
    judge_link.wait_for(timeout=WORKER_MS)  # the page follows the worker's generation
    arena = BlindTask.objects.get(project=demo_project)
    assert arena.pairs.count() == 10
    assert all(p.ground_truth for p in arena.pairs.all())
    arena_url = page.url
    judge_link.click()
    judged = 0
    ready = "() => { const el = document.getElementById('he-item'); return !el || el.dataset.ready; }"
    page.wait_for_function(ready)  # the keys are bound once the judging script has run
    while page.locator("#he-item").count():
        pair = page.locator("#he-item").get_attribute("data-pair")
        url = page.url
        page.keyboard.press("3" if judged % 2 else "1")
        page.wait_for_function("([id, url]) => { const el = document.getElementById('he-item'); "
                               "return location.href !== url || !el || el.dataset.pair !== id; }",
                               arg=[pair, url])
        page.wait_for_function(ready)
        judged += 1
    assert judged == arena.pairs.filter(identical=False).count()
    page.goto(arena_url)
    page.get_by_role("button", name="Close and show the results").click()
    results = page.locator("#blind-results").inner_text()
    assert "B wins" in results and "Ties" in results and "Identical responses" in results
    shot(page, "arena-results")

    # 10. an automatic judge: the run's reward, given each pair's ground truth; the page follows it live
    panel = page.locator("#judges")
    panel.get_by_label("Judge with").select_option(value="reward")
    panel.get_by_role("button", name="Run the judge").click()
    page.wait_for_selector("#judges tr[data-judge-run]:has-text('succeeded')", timeout=WORKER_MS)
    verdicts = page.locator("#judges tr[data-judge-run]").inner_text()
    assert re.search(r"\d+ / \d+ / \d+", verdicts)
    shot(page, "arena-judge")
