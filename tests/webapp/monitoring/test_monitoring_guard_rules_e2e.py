"""The guarded demo preset on a real run: a Celery worker trains the demo policy, beat syncs it, the
preset's KL rule trips (the demo's KL passes 0.3 within a few dozen steps), restores the newest checkpoint
where every rule held with half the lr, and the run continues; the page shows the rule tripped, the marker
on the KL chart and the entry in the history."""
from __future__ import annotations

import time

import pytest

from tests.browser_support import login
from tests.webapp.monitoring.conftest import job_inputs
from webapp.core.models import AuditLog
from webapp.runs.models import Job, JobAttempt, MetricPoint, RunEvent

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]
PASSWORD = "pw-for-tests-1"
TIMEOUT_S = 300


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


def test_guarded_demo_trips_and_restores(page, live_server, project, engineer, demo_model_dir,  # noqa: F811
                                         celery_worker_proc, celery_beat_proc, stop_runs, shot):  # noqa: F811
    from webapp.runs.services import job_create

    job = job_create(project=project, user=engineer, kind="grpo", backend="local", preset="demo-cpu-guarded",
                     hp_overrides={"max_steps": 80}, include_unreviewed=True,
                     **job_inputs(project, demo_model_dir))
    lr = job.config["hp"]["lr"]
    try:
        trip = _wait(lambda: RunEvent.objects.filter(job=job, kind="guard_rule", data__action="restore").first(),
                     "the KL rule to restore")
    except AssertionError:
        job.refresh_from_db()
        kl = list(MetricPoint.objects.filter(job=job, name="actor/kl_loss").order_by("step")
                  .values_list("step", "value"))
        events = list(RunEvent.objects.filter(job=job).values_list("kind", "step", "message"))
        raise AssertionError(f"no restore: state {job.state} error {job.error[-500:]!r}\nKL {kl}\nevents {events}\n"
                             f"worker log: {celery_worker_proc.log_path.read_text()[-3000:]}") from None
    values, to_step = trip.data["values"], trip.data["to_step"]
    assert trip.data["rule"] == "kl" and len(values) == 3 and all(v > 0.3 for _s, v in values)
    assert to_step < values[0][0] and trip.data["hp"]["lr"] == pytest.approx(lr * 0.5)
    kl_at_target = MetricPoint.objects.get(job=job, attempt=1, step=to_step, name="actor/kl_loss").value
    assert kl_at_target <= 0.3  # the restored checkpoint is one where the rule held
    assert AuditLog.objects.filter(action="guard_rule.restore", object_id=str(job.pk)).exists()
    attempt = _wait(lambda: JobAttempt.objects.filter(job=job, number=2).first(), "the restored attempt")
    assert attempt.reason == "guard_rule" and attempt.resume_from.endswith(f"global_step_{to_step}")
    point = _wait(lambda: MetricPoint.objects.filter(job=job, attempt=2, step=to_step + 1, name="actor/lr").first(),
                  "the restored attempt's first step")
    assert point.value == pytest.approx(lr * 0.5)

    login(page, live_server, "erin", PASSWORD)
    page.goto(f"{live_server.url}/p/acme/jobs/{job.pk}/")
    rule = page.locator('#mon-rules li[data-rule="kl"]')
    assert "actor/kl_loss above 0.3" in rule.inner_text()
    page.wait_for_function("(document.getElementById('chart-kl')?.data || []).some(t => t.name === 'health rule')")
    shot(page, "guard-rule-on-the-kl-curve")
    page.click("#tab-history")
    assert "restoring step" in page.inner_text("#mon-history")
    Job.objects.filter(pk=job.pk).update(cancel_requested=True)
