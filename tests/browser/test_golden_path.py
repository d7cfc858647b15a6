"""The newcomer's golden path in a real browser, with a real Celery worker and beat:
log in → create a project → upload preferences and prompts → review three pairs with the keyboard →
write a reward function and test-run it → register the demo model → launch the demo GRPO job →
watch the reward curve grow live → roll back to a checkpoint → see the child run and its lineage."""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from tests.browser.browser_helpers import PASSWORD, REWARD_SOURCE, demo_files
from tests.browser.conftest import SCREENSHOTS, login
from tests.browser_support import start_test_run

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
# 60 steps: short, yet long enough (several 2-s syncs even on a fast machine) to watch the curve grow;
# WB_GOLDEN_STEPS=150 draws a longer curve for the README picture.
MAX_STEPS = int(os.environ.get("WB_GOLDEN_STEPS", "60"))
SAVE_FREQ = MAX_STEPS // 3
RUN_TIMEOUT_MS = 240_000  # a loaded 2-core machine: starting torch alone can take 20 s

# The raw reward line of the "Reward" chart (monitor.js names it "mean", or "mean (raw)" when smoothed).
REWARD_POINTS_JS = """() => {
  const div = document.getElementById('chart-reward');
  if (!div || !div.data) return 0;
  const t = div.data.find((d) => d.name === 'mean (raw)' || d.name === 'mean');
  return t && t.x ? t.x.length : 0;
}"""
REWARD_FIRST_STEP_JS = """() => {
  const div = document.getElementById('chart-reward');
  const t = div && div.data && div.data.find((d) => d.name === 'mean (raw)' || d.name === 'mean');
  return t && t.x && t.x.length ? t.x[0] : null;
}"""


@pytest.fixture
def newcomer(django_user_model, settings):
    settings.PROJECT_CREATORS = "everyone"  # a workbench where any account may start a project
    return django_user_model.objects.create_user(username="nina", password=PASSWORD)


@pytest.fixture
def demo_model_dir(settings):
    """The demo policy on disk, as `manage.py build_demo_model` leaves it (a few seconds, offline)."""
    import torch

    from training.demo import build_demo_model

    torch.set_num_threads(1)
    return build_demo_model(Path(settings.MODELS_ROOT) / "demo-tiny")


def job_id_of(url: str) -> int | None:
    m = re.search(r"/jobs/(\d+)/(#.*)?$", url)
    return int(m.group(1)) if m else None


def choose(select, text: str) -> None:
    """Pick the option of a <select> whose visible text contains `text`."""
    value = select.locator("option", has_text=text).first.get_attribute("value")
    select.select_option(value=value)


def upload(page, base: str, path: Path) -> None:
    page.goto(f"{base}/datasets/")
    page.get_by_role("link", name="Import a dataset").first.click()
    page.wait_for_url("**/datasets/upload/")
    page.wait_for_load_state("load")  # the upload script listens for the file choice
    page.set_input_files("input[type=file][name=file]", str(path))
    assert page.input_value("#id_name") == path.stem  # the name is filled from the file name
    page.get_by_role("button", name="Upload and import").click()
    page.wait_for_url(re.compile(r"/datasets/\d+/v1/"))


def test_golden_path(page, live_server, newcomer, demo_model_dir, celery_worker_proc, celery_beat_proc, stop_runs,
                     tmp_path, shot):
    from webapp.runs.models import Job

    # 1. log in and create a project
    login(page, live_server, "nina", PASSWORD)
    page.get_by_label("Name").fill("Sums team")
    page.get_by_role("button", name="Create project").click()
    page.wait_for_url(f"{live_server.url}/p/sums-team/")
    assert page.locator("h1").inner_text() == "Sums team"
    shot(page, "project-created")
    base = f"{live_server.url}/p/sums-team"

    # 2. upload a preference file and a prompt file
    prefs_file, prompts_file = demo_files(tmp_path)
    upload(page, base, prefs_file)
    assert "8" in page.locator("main").inner_text()
    shot(page, "preferences-uploaded")
    upload(page, base, prompts_file)
    shot(page, "prompts-uploaded")

    # 3. review three pairs with the keyboard (no page load between decisions)
    page.get_by_role("navigation", name="Project").get_by_role("link", name="Review").click()
    page.get_by_role("row", name=re.compile("sum-preferences")).get_by_role("link", name="Review").click()
    page.wait_for_selector("#rv-item:not([hidden])")
    page.evaluate("window.__sameDocument = true")
    page.keyboard.press("l")  # show the dataset's labels: approving "as labelled" needs them
    for key, index in (("1", "1"), ("2", "2"), ("a", "3")):
        page.keyboard.press(key)
        page.wait_for_function(f"document.getElementById('rv-index').textContent === '{index}'")
    assert page.locator("#rv-progress").inner_text().startswith("3 done")
    assert page.evaluate("window.__sameDocument") is True
    shot(page, "reviewed-three")

    # 4. write a reward function in the editor and test-run it on the prompts
    page.get_by_role("navigation", name="Project").get_by_role("link", name="Reward functions").click()
    page.get_by_role("link", name="New reward function").first.click()
    page.get_by_label("Name", exact=True).fill("exact-match")
    page.locator(".CodeMirror").click()
    page.keyboard.press("Control+a")
    page.keyboard.press("Delete")
    page.keyboard.insert_text(REWARD_SOURCE)
    assert page.evaluate("document.querySelector('.CodeMirror').CodeMirror.getValue()") == REWARD_SOURCE
    page.get_by_role("button", name="Create version 1").click()
    page.wait_for_url(re.compile(r"/rewards/\d+/$"))
    choose(page.get_by_label("Dataset version"), "sum-prompts v1")
    page.get_by_label("Samples (N)").fill("10")
    start_test_run(page)
    page.wait_for_selector(".test-run-results .per-sample")
    assert "Done: 10 samples" in page.locator("#test-run-status").inner_text()
    # the prompt set has no reference answers, so each ground truth is scored against itself: all 1.0
    summary = page.locator(".test-run-results table.summary tbody tr").first.inner_text()
    assert "1.0000" in summary
    shot(page, "reward-test-run")

    # 5. register the demo model (built on disk by `manage.py build_demo_model`) on the models page
    page.get_by_role("navigation", name="Project").get_by_role("link", name="Models").click()
    page.get_by_label("Name").fill("demo-tiny")
    page.get_by_label("Local folder").fill(str(demo_model_dir))
    page.get_by_role("button", name="Register").click()
    page.wait_for_selector("text=Registered demo-tiny")

    # 6. launch the demo GRPO job (preset demo-cpu, fewer steps)
    page.get_by_role("navigation", name="Project").get_by_role("link", name="Jobs").click()
    page.get_by_role("link", name="New job").click()
    assert page.get_by_label("Preset").input_value() == "demo-cpu"
    choose(page.get_by_label("Dataset version"), "sum-prompts v1")
    choose(page.get_by_label("Base model"), "demo-tiny")
    page.get_by_label("exact-match weight").fill("1")
    page.get_by_label("Max steps").fill(str(MAX_STEPS))
    page.get_by_label("Save a checkpoint every N steps").fill(str(SAVE_FREQ))
    page.get_by_label("Validate every N steps").fill(str(SAVE_FREQ))
    page.wait_for_selector("#preview-status:has-text('Ready to launch')")
    shot(page, "launch-form")
    page.get_by_role("button", name="Review the configuration").click()
    page.wait_for_selector("text=Review before launch")
    shot(page, "launch-review")
    page.get_by_role("button", name="Launch", exact=True).click()
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    parent = Job.objects.get(project__slug="sums-team")
    assert (parent.kind, parent.preset, parent.config["hp"]["max_steps"]) == ("grpo", "demo-cpu", MAX_STEPS)

    # 7. the reward curve grows while we watch, without a reload
    page.evaluate("window.__sameDocument = true")
    page.wait_for_function(f"({REWARD_POINTS_JS})() >= 1", timeout=RUN_TIMEOUT_MS)
    first = page.evaluate(REWARD_POINTS_JS)
    page.wait_for_function(f"window.__sameDocument === true && ({REWARD_POINTS_JS})() > {first}",
                           timeout=RUN_TIMEOUT_MS)
    assert page.evaluate("window.__sameDocument") is True
    shot(page, "curves-live")

    # the page reloads itself once the run ends; then the checkpoints are listed
    page.wait_for_selector("#job-state:has-text('succeeded')", timeout=RUN_TIMEOUT_MS)
    # the reload has happened once the server-rendered page no longer offers Cancel
    page.get_by_role("button", name="Cancel", exact=True).wait_for(state="detached")
    # (a locator, not a JS wait: it survives the reload)
    page.get_by_role("tab", name=re.compile(r"Checkpoints \([1-9]")).wait_for()
    page.wait_for_function(f"({REWARD_POINTS_JS})() === {MAX_STEPS}")
    shot(page, "run-finished")

    # 8. roll back to the first checkpoint through the confirm dialog
    page.get_by_role("tab", name=re.compile("Checkpoints")).click()
    step_cell = page.locator("th", has_text=re.compile(rf"^{SAVE_FREQ}$"))
    row = page.locator("table.mon-ckpts tbody tr").filter(has=step_cell)
    row.get_by_role("link", name="Roll back").click()
    dialog = page.get_by_role("dialog")
    dialog.wait_for()
    assert f"step {SAVE_FREQ}" in dialog.inner_text()
    dialog.get_by_label("Reason").fill("Golden path: try again from the first checkpoint")
    shot(page, "rollback-dialog")
    dialog.get_by_role("button", name="Roll back").click()
    page.wait_for_url(lambda url: job_id_of(url) not in (None, parent.pk))

    # 9. the child run: its page names its parent and step, the lineage tree shows both, its curve continues
    child = Job.objects.get(parent=parent)
    assert job_id_of(page.url) == child.pk
    assert f"rolled back from #{parent.pk} at step {SAVE_FREQ}" in page.locator("main").inner_text()
    page.get_by_role("tab", name=re.compile("Checkpoints")).click()  # the lineage tree lives in this tab
    lineage = page.locator(".mon-lineage")
    assert lineage.get_by_role("link", name=re.compile(f"run #{parent.pk}")).count() == 1
    assert f"run #{child.pk}" in lineage.locator("[aria-current=page]").inner_text()
    shot(page, "child-lineage")
    page.get_by_role("tab", name="Curves").click()
    page.wait_for_function(f"({REWARD_FIRST_STEP_JS})() !== null", timeout=RUN_TIMEOUT_MS)
    assert page.evaluate(REWARD_FIRST_STEP_JS) == SAVE_FREQ + 1  # resumes after the checkpoint's step
    shot(page, "child-run")

    # the parent's page now shows the rollback on its curves: the README's picture of the run page
    page.goto(f"{base}/jobs/{parent.pk}/")
    page.wait_for_function(f"({REWARD_POINTS_JS})() === {MAX_STEPS}")
    page.wait_for_selector("#chart-reward .shapelayer path", state="attached")
    save_run_page_screenshot(page)


def save_run_page_screenshot(page) -> None:
    """The README's run-page picture: the page from its title to the second row of charts (a PNG of
    ~200 KB). Copied into docs/ when WB_UPDATE_SCREENSHOTS=1, so ordinary runs leave the tree alone."""
    bottom = page.evaluate("""() => { const charts = document.querySelectorAll('#mon-charts .mon-chart');
        const last = charts[Math.min(3, charts.length - 1)];
        return Math.ceil(last.getBoundingClientRect().bottom + window.scrollY + 12); }""")
    width = page.viewport_size["width"]
    path = SCREENSHOTS / "run-page.png"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=True, clip={"x": 0, "y": 0, "width": width, "height": bottom})
    if os.environ.get("WB_UPDATE_SCREENSHOTS") == "1":
        target = ROOT / "docs" / "screenshots" / "run-page.png"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
