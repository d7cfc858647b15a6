"""The run page while a VERL run starts: the live log is text (Ray's and VERL's colour codes taken out), the start-up
phase follows the attempt's log until its first step, and the state words follow the job without a reload."""
from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.browser.browser_helpers import PASSWORD, seed_project
from tests.browser_support import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# What `ray job submit` and VERL print, colours included (as a terminal would get them).
COLOURED = ("2026-12-02 03:49:08,016\tSUCC cli.py:67 -- \x1b[1m\x1b[32mJob 'rlhf-9-a1' submitted successfully\x1b[39m"
            "\x1b[22m\n"
            "\x1b[36m(TaskRunner pid=4242)\x1b[0m [validate_config] All configuration checks passed successfully!\n"
            "ray init kwargs: {'num_cpus': 8}\n")


def _job(project, seeded, engineer, state):
    from webapp.runs.models import Job

    return Job.objects.create(project=project, name="verl run", kind="grpo", backend="verl", state=state,
                              preset="demo-cpu", queue="cpu", config={**seeded.job.config, "total_steps": 4},
                              base_model=seeded.model, dataset_version=seeded.prompts, created_by=engineer)


def test_a_starting_verl_run_shows_its_phase_and_a_clean_log(page, live_server, project, engineer, tmp_path, settings):
    from django.utils import timezone

    from webapp.runs.models import Job, JobAttempt, JobState, MetricPoint

    engineer.set_password(PASSWORD)
    engineer.save()
    seeded = seed_project(project, engineer, tmp_path)
    job = _job(project, seeded, engineer, JobState.QUEUED)
    attempt = JobAttempt.objects.create(job=job, number=1, state=JobState.QUEUED)
    login(page, live_server, engineer.username, PASSWORD)
    page.goto(f"{live_server.url}/p/{project.slug}/jobs/{job.pk}/")
    phase = page.locator("#job-phase")
    expect(phase).to_contain_text("Starting up: Waiting for a worker on the cpu queue")
    expect(page.locator("#attempt-state-1")).to_have_text("queued")

    # A worker takes it: the supervisor starts main_ppo, which starts Ray.
    run_dir = Path(settings.RUNS_ROOT) / project.slug / f"{job.pk}-startup"
    log = run_dir / "attempts" / "1" / "log.txt"
    log.parent.mkdir(parents=True)
    log.write_text(COLOURED)
    JobAttempt.objects.filter(pk=attempt.pk).update(state=JobState.RUNNING, supervisor_pid=1, started_at=timezone.now())
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, run_dir=str(run_dir), attempt_count=1,
                                         started_at=timezone.now())
    expect(phase).to_contain_text("Starting up: Starting Ray")
    expect(page.locator("#job-state")).to_have_text("running")
    expect(page.locator("#attempt-state-1")).to_have_text("running")  # not the stale "queued" of the first render
    log_box = page.locator("#job-log")
    expect(log_box).to_contain_text("Job 'rlhf-9-a1' submitted successfully")
    text = log_box.inner_text()
    assert "\x1b" not in text and "[32m" not in text and "[0m" not in text
    assert "(TaskRunner pid=4242) [validate_config]" in text

    # VERL's trainer starts its workers; then the first step arrives and the phase goes.
    with log.open("a") as fh:
        fh.write("\x1b[36m(TaskRunner pid=4242)\x1b[0m dataset len: 36\n"
                 "\x1b[36m(TaskRunner pid=4242)\x1b[0m Size of train dataloader: 2, Size of val dataloader: 1\n")
    expect(phase).to_contain_text("Starting up: Starting VERL's workers and loading the model")
    assert phase.inner_text().rstrip().endswith(" s")  # how long the start-up has taken so far
    MetricPoint.objects.create(job=job, attempt=1, step=1, name="critic/score/mean", value=0.5, wall_time=1.7e9)
    Job.objects.filter(pk=job.pk).update(last_step=1)
    expect(phase).to_be_hidden()
    expect(page.locator("#job-step")).to_have_text("1")
