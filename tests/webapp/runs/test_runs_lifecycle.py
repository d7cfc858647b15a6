"""Real runs (supervisor + local trainer, no Celery).

Kill the supervisor -> lost -> resume with every step once; cancel.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

import pytest

from training.rundir import AttemptDir
from training.supervisor import attempt_processes
from webapp.registry.models import ModelEntry, ModelKind
from webapp.runs.models import JobState, MetricPoint
from webapp.runs.services import job_cancel, job_create, job_launch, job_resume, sync_job

pytestmark = [pytest.mark.django_db, pytest.mark.slow]
SCORE = "critic/score/mean"


@pytest.fixture
def demo_model(project, demo_model_dir):
    return ModelEntry.objects.create(project=project, name="demo-tiny", kind=ModelKind.CAUSAL_LM,
                                     path=str(demo_model_dir))


@pytest.fixture
def supervisors():
    """Pids of supervisors started by a test; whatever is left is killed at the end."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def wait_for(job, predicate, timeout: float, what: str):
    deadline = time.time() + timeout
    while time.time() < deadline:
        sync_job(job)
        job.refresh_from_db()
        if predicate(job):
            return job
        time.sleep(0.5)
    log = Path(job.run_dir, "attempts", str(job.attempt_count), "log.txt")
    raise AssertionError(f"timed out waiting for {what}; state {job.state}, step {job.last_step}\n"
                         + (log.read_text()[-3000:] if log.exists() else "(no log)"))


def _launch(job, supervisors):
    assert job_launch(job.pk) == "launched"
    job.refresh_from_db()
    attempt = job.attempts.order_by("-number").first()
    assert attempt.supervisor_pid, job.error
    supervisors.append(attempt.supervisor_pid)
    return attempt


def test_killed_supervisor_is_lost_then_resume_logs_every_step_once(project, engineer, prompts_version, demo_model,
                                                                    reward_spec, no_enqueue, supervisors, settings):
    settings.RUN_HEARTBEAT_STALE_S = 4
    job = job_create(project=project, user=engineer, kind="grpo", backend="local", preset="demo-cpu",
                     # enough steps that a fast trainer is still going when its supervisor is killed
                     hp_overrides={"max_steps": 100, "save_freq": 10, "test_freq": 0}, dataset_version=prompts_version,
                     reward_spec=reward_spec, base_model=demo_model, include_unreviewed=True)
    first = _launch(job, supervisors)
    wait_for(job, lambda j: j.checkpoints.filter(step=10).exists() and j.last_step >= 13, 120, "checkpoint 10")
    os.kill(first.supervisor_pid, signal.SIGKILL)  # the worker host dies; the trainer dies with it (PDEATHSIG)
    adir = AttemptDir(Path(job.run_dir, "attempts", str(first.number)))
    deadline = time.time() + 180  # ends when they are gone
    while attempt_processes(adir.path) and time.time() < deadline:
        time.sleep(0.2)
    assert not attempt_processes(adir.path), "the trainer outlived its killed supervisor"
    # One sync once the last heartbeat is older than the configured 4 s (the default is 30 s) finds it lost:
    # the setting is honoured, whatever the machine's speed.
    time.sleep(max(0.0, json.loads(adir.heartbeat.read_text())["time"] + 4.5 - time.time()))
    sync_job(job)
    job.refresh_from_db()
    assert job.state == JobState.LOST, job.state
    killed_at = job.last_step
    ck = job.checkpoints.order_by("-step").first()
    assert ck.step % 10 == 0 and 10 <= ck.step < 100 and killed_at > ck.step - 1

    attempt = job_resume(job=job, user=engineer)
    assert attempt.resume_from == ck.path
    _launch(job, supervisors)
    wait_for(job, lambda j: j.state == JobState.SUCCEEDED, 180, "the resumed run to finish")
    steps = list(MetricPoint.objects.filter(job=job, name=SCORE).order_by("step").values_list("step", "attempt"))
    assert [s for s, _ in steps] == list(range(1, 101))  # no step missing, none twice
    assert {a for s, a in steps if s > ck.step} == {2} and {a for s, a in steps if s <= ck.step} == {1}
    log2 = Path(job.run_dir, "attempts", "2", "log.txt").read_text()
    assert f"at step {ck.step}" in log2
    assert job.last_step == 100 and job.attempt_count == 2


def test_cancel_stops_the_process_group(project, engineer, prompts_version, demo_model, reward_spec, no_enqueue,
                                        supervisors):
    job = job_create(project=project, user=engineer, kind="grpo", backend="local", preset="demo-cpu",
                     hp_overrides={"max_steps": 400, "test_freq": 0}, dataset_version=prompts_version,
                     reward_spec=reward_spec, base_model=demo_model, include_unreviewed=True)
    attempt = _launch(job, supervisors)
    wait_for(job, lambda j: j.last_step >= 2, 120, "training to start")
    job_cancel(job=job, user=engineer)
    wait_for(job, lambda j: j.state == JobState.CANCELLED, 180, "cancelled")
    trainer_pid = int(json.loads(Path(job.run_dir, "attempts", "1", "heartbeat").read_text())["pid"])
    deadline = time.time() + 180  # ends as soon as both are gone; a busy machine delays their exit
    while time.time() < deadline and (alive(attempt.supervisor_pid) or alive(trainer_pid)):
        time.sleep(0.2)
    assert not alive(attempt.supervisor_pid) and not alive(trainer_pid)
    assert json.loads(Path(job.run_dir, "attempts", "1", "exit.json").read_text())["cancelled"] is True


def alive(pid: int) -> bool:
    """Running (a zombie waiting for a non-reaping init counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in ("Z", "X")
