"""A worker killed while it starts a run loses nothing.

The launch task spawns the detached supervisor, then records its pid. A worker killed between the two
(SIGKILL, the OOM killer, a soak's fault injection) leaves the run training with the job `starting` and
no pid in the database: the sync must adopt it and ingest every step, not give the run up as lost.
"""
from __future__ import annotations

import pytest

from tests.webapp.runs.test_runs_lifecycle import demo_model, supervisors, wait_for  # noqa: F401
from training import supervisor as supervisor_module
from webapp.runs.models import Job, JobAttempt, JobState, MetricPoint, RunEvent
from webapp.runs.services import job_create, job_launch

pytestmark = pytest.mark.django_db
SCORE = "critic/score/mean"


class WorkerKilled(BaseException):
    """Stands for SIGKILL: nothing after it runs in the launch (no `except Exception` catches it)."""


@pytest.fixture
def launch_killed_after_spawn(monkeypatch, supervisors):  # noqa: F811
    real_spawn = supervisor_module.spawn_supervisor

    def spawn_then_die(attempt_dir, python=None):
        supervisors.append(real_spawn(attempt_dir, python))
        raise WorkerKilled

    monkeypatch.setattr(supervisor_module, "spawn_supervisor", spawn_then_die)
    return supervisors


@pytest.mark.slow
def test_a_worker_killed_after_spawning_the_supervisor_loses_no_step(project, engineer, prompts_version,
                                                                     demo_model, reward_spec,  # noqa: F811
                                                                     no_enqueue, launch_killed_after_spawn,
                                                                     settings):
    settings.RUN_HEARTBEAT_STALE_S = 4
    job = job_create(project=project, user=engineer, kind="grpo", backend="local", preset="demo-cpu",
                     hp_overrides={"max_steps": 6, "save_freq": 3, "test_freq": 0}, dataset_version=prompts_version,
                     reward_spec=reward_spec, base_model=demo_model, include_unreviewed=True)
    with pytest.raises(WorkerKilled):
        job_launch(job.pk)
    job.refresh_from_db()
    attempt = job.attempts.get()
    assert job.state == JobState.STARTING and attempt.supervisor_pid is None  # what the killed worker left

    # Well past the time a live launch records its pid, and longer than a "lost before start" would take
    # with this staleness limit: the run ends succeeded, with every step it wrote.
    wait_for(job, lambda j: j.state not in (JobState.STARTING, JobState.RUNNING), 300, "the run to end")
    assert job.state == JobState.SUCCEEDED, (job.state, job.error)
    attempt.refresh_from_db()
    assert attempt.supervisor_pid == launch_killed_after_spawn[0] and attempt.state == JobState.SUCCEEDED
    steps = sorted(MetricPoint.objects.filter(job=job, name=SCORE).values_list("step", flat=True))
    assert steps == list(range(1, 7))
    assert set(job.checkpoints.values_list("step", flat=True)) >= {3, 6}
    assert RunEvent.objects.filter(job=job, message__contains="the worker stopped while starting it").exists()


def test_a_slow_launch_changes_nothing_once_the_sync_adopted_its_supervisor(project, engineer, prompts_version,
                                                                             tiny_model, reward_spec, no_enqueue,
                                                                             monkeypatch):
    """The race the other way round: the sync adopts while the launch is still waiting for its spawn."""
    job = job_create(project=project, user=engineer, kind="grpo", backend="local", preset="demo-cpu",
                     hp_overrides={"max_steps": 6}, dataset_version=prompts_version, reward_spec=reward_spec,
                     base_model=tiny_model, include_unreviewed=True)

    def spawn_adopted_meanwhile(attempt_dir, python=None):
        attempt = job.attempts.get()
        JobAttempt.objects.filter(pk=attempt.pk).update(supervisor_pid=111, host="h", state=JobState.SUCCEEDED)
        Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED)
        return 222

    monkeypatch.setattr(supervisor_module, "spawn_supervisor", spawn_adopted_meanwhile)
    assert job_launch(job.pk) == "launched"
    job.refresh_from_db()
    attempt = job.attempts.get()
    assert (job.state, attempt.state, attempt.supervisor_pid) == (JobState.SUCCEEDED, JobState.SUCCEEDED, 111)
