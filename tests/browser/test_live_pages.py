"""Live job page: the metric picker lists metrics as the run logs them, and the progress card's step is the one the
charts show."""
from __future__ import annotations

import pytest

from tests.browser.browser_helpers import PASSWORD, seed_project
from tests.browser_support import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PICKER_JS = "() => [...document.querySelectorAll('#mon-add option')].map((o) => o.textContent)"
REWARD_LAST_X_JS = """() => {
  const div = document.getElementById('chart-reward');
  const t = div && div.data && div.data.find((d) => d.name === 'mean (raw)' || d.name === 'mean');
  return t && t.x && t.x.length ? t.x[t.x.length - 1] : null;
}"""


def _log(job, first: int, last: int, names=("critic/score/mean",)) -> None:
    from webapp.runs.models import Job, MetricPoint

    MetricPoint.objects.bulk_create(MetricPoint(job=job, step=s, name=n, value=0.1 * s, wall_time=1.7e9 + s)
                                    for s in range(first, last + 1) for n in names)
    Job.objects.filter(pk=job.pk).update(last_step=last)  # what the run sync records with the points


def _running_job_and_login(page, live_server, project, engineer, tmp_path):
    """A running GRPO job of 40 steps that has logged nothing yet; the engineer is logged in."""
    from webapp.runs.models import Job, JobState

    engineer.set_password(PASSWORD)
    engineer.save()
    seeded = seed_project(project, engineer, tmp_path)
    job = Job.objects.create(project=project, name="live run", kind="grpo", state=JobState.RUNNING, preset="demo-cpu",
                             config={**seeded.job.config, "total_steps": 40}, base_model=seeded.model,
                             dataset_version=seeded.prompts, created_by=engineer)
    login(page, live_server, engineer.username, PASSWORD)
    return job


def test_metric_picker_and_progress_step_follow_the_run(page, live_server, project, engineer, tmp_path, shot):
    job = _running_job_and_login(page, live_server, project, engineer, tmp_path)
    page.goto(f"{live_server.url}/p/acme/jobs/{job.pk}/")
    page.wait_for_function("document.querySelectorAll('#mon-add option').length > 0")
    assert page.evaluate(PICKER_JS) == ["No metrics logged yet"]

    # The run logs its first steps, then a new metric appears with the next ones, sooner than the picker re-reads
    # its names after the first (every 5 s at most): both reach the page without a reload, and no later step is
    # needed for the new name to show.
    page.evaluate("window.__samePage = true")
    _log(job, 1, 6)
    page.wait_for_function(f"({REWARD_LAST_X_JS})() === 6")
    page.wait_for_function(f"({PICKER_JS})()[0] === 'Add a chart…'")  # the names were read after step 6
    _log(job, 7, 8, names=("critic/score/mean", "custom/answer_len"))
    page.wait_for_function(f"({PICKER_JS})().includes('custom/answer_len')")
    _log(job, 9, 12)
    page.wait_for_function(f"({REWARD_LAST_X_JS})() === 12")
    page.wait_for_function("document.getElementById('job-step').textContent === '12'")
    assert "step 12" in page.locator("#mon-status").inner_text()
    assert page.get_by_role("progressbar", name="Progress").get_attribute("aria-valuenow") == "30"  # 12 of 40
    assert page.evaluate("window.__samePage") is True
    shot(page, "live")

    # Picking the new metric draws it; the picker keeps offering the rest.
    page.select_option("#mon-add", "custom/answer_len")
    page.wait_for_selector("#chart-m_custom_answer_len .main-svg")
    assert "custom/answer_len" not in page.evaluate(PICKER_JS)

    # The old monitor address opens the same page, whose step follows the run too.
    page.goto(f"{live_server.url}/p/acme/monitor/jobs/{job.pk}/")
    page.wait_for_url(f"{live_server.url}/p/acme/jobs/{job.pk}/**")
    page.wait_for_function("document.getElementById('job-step').textContent === '12'")
    _log(job, 13, 15)
    page.wait_for_function("document.getElementById('job-step').textContent === '15'")
    page.wait_for_function(f"({REWARD_LAST_X_JS})() === 15")


def test_metrics_logged_while_the_page_first_reads_them_reach_the_picker(page, live_server, project, engineer,
                                                                         tmp_path):
    """The run logs its first steps after the page was rendered (no names yet) but before the page's first full read
    of the metrics answers: that read brings the points, no live poll finds them new, and the picker must still
    learn their names."""
    job = _running_job_and_login(page, live_server, project, engineer, tmp_path)
    held = []
    page.route(f"**/monitor/jobs/{job.pk}/metrics/?**",  # the first full read waits here; later ones go through
               lambda route: route.continue_() if held else held.append(route))
    page.goto(f"{live_server.url}/p/acme/jobs/{job.pk}/")
    page.wait_for_function("document.querySelectorAll('#mon-add option').length > 0")
    assert page.evaluate(PICKER_JS) == ["No metrics logged yet"]
    while not held:
        page.wait_for_timeout(50)  # until the page has asked for its first full read
    _log(job, 1, 6)
    held[0].continue_()
    page.wait_for_function(f"({REWARD_LAST_X_JS})() === 6")
    page.wait_for_function(f"({PICKER_JS})()[0] === 'Add a chart…'")  # names read after the read brought points
