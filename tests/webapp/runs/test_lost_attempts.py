"""A lost attempt is stopped, and no new attempt starts while an old trainer of the job lives.

The real drill: the supervisor is frozen (SIGSTOP, as a stall or a clock skew between hosts looks
from the web app) while its trainer, in its own process group, keeps training.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.webapp.runs.test_runs_lifecycle import _launch, alive, demo_model, supervisors, wait_for  # noqa: F401
from training.supervisor import ATTEMPT_ENV
from webapp.core.services import ApplicationError
from webapp.runs.models import JobAttempt, JobState, MetricPoint
from webapp.runs.services import job_cancel, job_create, job_launch, job_resume

pytestmark = pytest.mark.django_db


def _gone(*pids: int, timeout: float = 120) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.2)
    return False


@pytest.mark.slow
def test_a_frozen_supervisor_goes_lost_and_its_trainer_is_killed(project, engineer, prompts_version,
                                                                  demo_model, reward_spec, no_enqueue,  # noqa: F811
                                                                  supervisors, settings):  # noqa: F811
    settings.RUN_HEARTBEAT_STALE_S = 4
    job = job_create(project=project, user=engineer, kind="grpo", backend="local", preset="demo-cpu",
                     # far more steps than the test waits for: on a fast machine the run must still be going
                     hp_overrides={"max_steps": 100_000, "save_freq": 5, "test_freq": 0, "keep_last_k": 2},
                     dataset_version=prompts_version, reward_spec=reward_spec, base_model=demo_model,
                     include_unreviewed=True)
    first = _launch(job, supervisors)
    # any checkpoint will do (retention keeps the last 2, and a fast trainer may be past step 5 already)
    wait_for(job, lambda j: j.checkpoints.exists() and j.last_step > j.checkpoints.order_by("step").first().step,
             120, "a checkpoint")
    adir = Path(job.run_dir, "attempts", "1")
    trainer = int(json.loads((adir / "heartbeat").read_text())["pid"])
    os.kill(first.supervisor_pid, signal.SIGSTOP)
    wait_for(job, lambda j: j.state == JobState.LOST, 300, "lost")
    assert _gone(trainer, first.supervisor_pid), "the lost attempt's trainer kept training"
    assert (adir / "KILLED").exists()
    lost_at = job.checkpoints.order_by("-step").first().step

    attempt = job_resume(job=job, user=engineer)
    _launch(job, supervisors)
    wait_for(job, lambda j: j.last_step >= lost_at + 7, 180, "the resumed attempt to pass a checkpoint")
    job_cancel(job=job, user=engineer)
    wait_for(job, lambda j: j.state == JobState.CANCELLED, 300, "cancelled")
    job.refresh_from_db()
    # one trainer wrote after the resume: every later step and checkpoint is the resumed attempt's
    assert attempt.resume_from.endswith(f"global_step_{lost_at}")
    assert set(MetricPoint.objects.filter(job=job, step__gt=lost_at).values_list("attempt", flat=True)) == {2}
    assert max(job.checkpoints.values_list("step", flat=True)) <= job.last_step


@pytest.fixture
def lost_with_a_live_trainer(project, engineer, api_for, no_enqueue, fake_supervisor, prompts_version, tiny_model,
                             reward_spec):
    """A job whose attempt 1 is `lost` while its trainer still runs (a sleeping stand-in, in its own group)."""
    job = job_create(project=project, user=engineer, kind="grpo", backend="local", preset="demo-cpu",
                     hp_overrides={"max_steps": 10}, dataset_version=prompts_version, reward_spec=reward_spec,
                     base_model=tiny_model, include_unreviewed=True)
    job_launch(job.pk)
    job.refresh_from_db()
    adir = Path(job.run_dir) / "attempts" / "1"
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True,
                               env={**os.environ, ATTEMPT_ENV: str(adir.resolve())})
    (adir / "heartbeat").write_text(json.dumps({"time": time.time() - 600, "pid": trainer.pid}))
    ckpt = Path(job.run_dir) / "checkpoints" / "global_step_5"
    ckpt.mkdir(parents=True)
    job.checkpoints.create(step=5, path=str(ckpt))
    JobAttempt.objects.filter(job=job).update(state=JobState.LOST)
    job.state = JobState.LOST
    job.save(update_fields=["state"])
    yield job, adir, trainer
    trainer.kill()
    trainer.wait()


def test_resume_on_the_trainers_host_stops_it_first(lost_with_a_live_trainer, engineer):
    job, adir, trainer = lost_with_a_live_trainer
    attempt = job_resume(job=job, user=engineer)
    assert attempt.number == 2
    assert trainer.wait(timeout=120) == -signal.SIGKILL
    assert (adir / "KILLED").exists()


def test_resume_refuses_while_a_trainer_on_another_host_may_live(lost_with_a_live_trainer, engineer):
    job, adir, trainer = lost_with_a_live_trainer
    JobAttempt.objects.filter(job=job).update(host="gpu-node-7")
    with pytest.raises(ApplicationError, match="gpu-node-7") as err:
        job_resume(job=job, user=engineer)
    assert "--kill" in err.value.message
    job.refresh_from_db()
    assert job.state == JobState.LOST and job.attempts.count() == 1 and trainer.poll() is None
    # on that host, the acknowledged kill (the command the message gives) lets the resume through
    out = subprocess.run([sys.executable, "-m", "training.supervisor", "--attempt-dir", str(adir), "--kill"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert trainer.wait(timeout=120) == -signal.SIGKILL
    assert job_resume(job=job, user=engineer).number == 2


def test_checkpoints_of_a_given_up_attempt_are_not_listed(lost_with_a_live_trainer):
    from training.checkpoints import publish_checkpoint
    from webapp.runs.services.sync import sync_checkpoints

    job, adir, trainer = lost_with_a_live_trainer
    root = Path(job.run_dir) / "checkpoints"
    publish_checkpoint(root, 40, lambda d: None, {"format": "local", "attempt": 1})  # the orphan, far ahead
    publish_checkpoint(root, 8, lambda d: None, {"format": "local", "attempt": 2})
    publish_checkpoint(root, 9, lambda d: None, {"format": "local"})  # no attempt recorded (VERL)
    sync_checkpoints(job)
    assert sorted(job.checkpoints.values_list("step", flat=True)) == [5, 8, 9]


def test_a_guard_restore_never_launches_beside_a_stalled_trainer(project, engineer, no_enqueue, fake_supervisor,
                                                               prompts_version, tiny_model, reward_spec):
    """The KL guard restores a running job whose supervisor stalled before it saw CANCEL: the new
    attempt starts only once the old trainer is gone."""
    job = job_create(project=project, user=engineer, kind="grpo", backend="local", preset="demo-cpu",
                     hp_overrides={"max_steps": 10}, dataset_version=prompts_version, reward_spec=reward_spec,
                     base_model=tiny_model, include_unreviewed=True)
    job_launch(job.pk)
    job.refresh_from_db()
    adir = Path(job.run_dir) / "attempts" / "1"
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True,
                               env={**os.environ, ATTEMPT_ENV: str(adir.resolve())})
    try:
        (adir / "heartbeat").write_text(json.dumps({"time": time.time() - 600, "pid": trainer.pid}))
        ckpt = Path(job.run_dir) / "checkpoints" / "global_step_5"
        ckpt.mkdir(parents=True)
        attempt = job_resume(job=job, user=engineer, reason="guard_rule", checkpoint=job.checkpoints.create(
            step=5, path=str(ckpt)))
        assert job_launch(job.pk) == "launched" and len(fake_supervisor) == 2
        assert trainer.wait(timeout=120) == -signal.SIGKILL  # stopped before attempt 2 started
        assert (adir / "KILLED").exists() and attempt.number == 2
    finally:
        trainer.kill()
        trainer.wait()
