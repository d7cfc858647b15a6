"""The KL guard on a real run: a Celery worker launches the local trainer, beat syncs it every 2 s, the
guard trips when the KL passes a (deliberately low) threshold, restores the last good checkpoint with a
smaller lr, and the run continues from there; the browser shows the trigger on the KL curve."""
from __future__ import annotations

import time

import pytest

from tests.browser_support import login
from tests.webapp.monitoring.conftest import job_inputs
from webapp.runs.models import Job, JobAttempt, MetricPoint, RunEvent

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]
PASSWORD = "pw-for-tests-1"
TIMEOUT_S = 300
LR = 1e-3  # the demo policy's KL passes 0.1 within a few dozen steps at this lr


def _wait(predicate, what: str, timeout: float = TIMEOUT_S):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def demo_model_dir(settings):
    import torch

    from training.demo import build_demo_model

    torch.set_num_threads(1)
    return build_demo_model(settings.MODELS_ROOT / "demo-tiny")


def test_guard_restores_a_real_run_which_continues(page, live_server, project, engineer, demo_model_dir,  # noqa: F811
                                                  celery_worker_proc, celery_beat_proc, stop_runs, shot):  # noqa: F811
    from webapp.runs.services import job_create

    guard = {"rule": "kl", "threshold": 0.1, "patience": 2, "action": "restore", "lr_factor": 0.25,
             "max_restores": 1}
    job = job_create(project=project, user=engineer, kind="grpo", backend="local", preset="demo-cpu",
                     hp_overrides={"max_steps": 60, "save_freq": 2, "test_freq": 0, "lr": LR,
                                   "keep_last_k": 50, "guard_rules": [guard]},
                     include_unreviewed=True, **job_inputs(project, demo_model_dir))
    try:
        trip = _wait(lambda: RunEvent.objects.filter(job=job, kind="guard_rule", data__action="restore").first(),
                     "the guard to restore")
    except AssertionError:
        job.refresh_from_db()
        kl = list(MetricPoint.objects.filter(job=job, name="actor/kl_loss").order_by("step")
                  .values_list("step", "value"))
        events = list(RunEvent.objects.filter(job=job).values_list("kind", "step", "message"))
        raise AssertionError(f"no restore: state {job.state} error {job.error[-500:]!r}\nKL {kl}\nevents {events}\n"
                             f"worker log: {celery_worker_proc.log_path.read_text()[-3000:]}") from None
    to_step, values = trip.data["to_step"], trip.data["values"]
    assert all(kl > 0.1 for _s, kl in values) and len(values) == 2
    assert to_step < values[0][0]
    assert trip.data["hp"]["lr"] == pytest.approx(LR * 0.25)
    # the run continues from the restored checkpoint: attempt 2 logs the step after it, with the new lr
    # (the event is committed by the sync; the new attempt is recorded just after it, by the resume)
    attempt = _wait(lambda: JobAttempt.objects.filter(job=job, number=2).first(), "the restored attempt")
    assert attempt.reason == "guard_rule" and attempt.resume_from.endswith(f"global_step_{to_step}")
    try:
        point = _wait(lambda: MetricPoint.objects.filter(job=job, attempt=2, step=to_step + 1,
                                                         name="actor/lr").first(), "the restored attempt's first step")
    except AssertionError:
        job.refresh_from_db()
        attempts = list(JobAttempt.objects.filter(job=job).values_list("number", "state", "returncode", "reason"))
        raise AssertionError(f"restored attempt never logged: state {job.state}, attempts {attempts}, "
                             f"error {job.error[-500:]!r}\nworker log: "
                             f"{celery_worker_proc.log_path.read_text()[-3000:]}") from None
    assert point.value == pytest.approx(LR * 0.25)

    login(page, live_server, "erin", PASSWORD)
    page.goto(f"{live_server.url}/p/acme/jobs/{job.pk}/")
    page.wait_for_function("(document.getElementById('chart-kl')?.data || []).some(t => t.name === 'health rule')")
    shot(page, "kl-guard-on-the-curve")
    page.click("#tab-history")
    assert "restoring step" in page.inner_text("#mon-history")
    job.refresh_from_db()
    assert job.config["hp"]["lr"] == pytest.approx(LR * 0.25)
    Job.objects.filter(pk=job.pk).update(cancel_requested=True)
