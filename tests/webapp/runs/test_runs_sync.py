"""sync_job on run directories written by hand in VERL's formats: idempotent ingest, states, checkpoints, hook."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from webapp.runs.models import Checkpoint, CheckpointStatus, Job, JobAttempt, JobState, MetricPoint
from webapp.runs.services import job_create, job_launch, job_resume, sync_active_jobs, sync_job
from webapp.runs.signals import job_synced

pytestmark = pytest.mark.django_db


@pytest.fixture
def running_job(project, engineer, prompts_version, tiny_model, reward_spec, no_enqueue, fake_supervisor):
    job = job_create(project=project, user=engineer, kind="grpo", backend="local", preset="demo-cpu",
                     hp_overrides={"max_steps": 10}, dataset_version=prompts_version, reward_spec=reward_spec,
                     base_model=tiny_model, include_unreviewed=True)
    job_launch(job.pk)
    job.refresh_from_db()
    return job


def adir(job: Job, k: int = 1) -> Path:
    return Path(job.run_dir) / "attempts" / str(k)


def beat(job, k=1, age=0.0):
    (adir(job, k) / "heartbeat").write_text(json.dumps({"time": time.time() - age, "pid": 1}))


def log_steps(job, steps, k=1, score=lambda s: s / 10, extra=""):
    with (adir(job, k) / "metrics.jsonl").open("a") as fh:
        for s in steps:
            fh.write(json.dumps({"step": s, "data": {"critic/score/mean": score(s), "actor/kl_loss": None}}) + "\n")
        fh.write(extra)


def points(job, name="critic/score/mean"):
    return dict(MetricPoint.objects.filter(job=job, name=name).values_list("step", "value"))


def test_ingest_is_incremental_and_idempotent(running_job):
    job = running_job
    beat(job)
    log_steps(job, [1, 2, 3], extra='{"step": 4, "data": {"critic/sc')  # a torn last line waits
    new = sync_job(job)
    assert len(new) == 6 and points(job) == {1: 0.1, 2: 0.2, 3: 0.3}
    assert MetricPoint.objects.get(job=job, name="actor/kl_loss", step=2).value is None  # NaN written as null
    assert sync_job(job) == [] and MetricPoint.objects.filter(job=job).count() == 6  # re-sync adds nothing
    with (adir(job) / "metrics.jsonl").open("a") as fh:
        fh.write('ore/mean": 0.4}}\n')
    assert [p.step for p in sync_job(job)] == [4]
    job.refresh_from_db()
    assert job.last_step == 4 and job.state == JobState.RUNNING and job.heartbeat_at is not None
    assert JobAttempt.objects.get(job=job, number=1).ingest["offset"] > 0


def test_a_rollout_dump_adds_the_tied_group_share_to_its_step(running_job):
    job = running_job
    beat(job)
    rollout = Path(job.run_dir) / "samples" / "rollout"
    rollout.mkdir(parents=True)
    rows = [("p1", 1.0), ("p2", 0.0), ("p1", 1.0), ("p2", 1.0)]  # p1 ties, p2 does not
    (rollout / "2.jsonl").write_text("".join(json.dumps({"input": i, "output": "o", "gts": None, "score": r,
                                                         "step": 2}) + "\n" for i, r in rows))
    log_steps(job, [1, 2])
    sync_job(job)
    assert points(job, "critic/zero_variance_group_share") == {2: 0.5}  # step 1 has no dump


def test_a_validation_dump_adds_wins_ties_losses_and_accuracy_to_its_step(running_job):
    job = running_job
    beat(job)
    val = Path(job.run_dir) / "samples" / "val"
    val.mkdir(parents=True)
    rows = [(1.0, 1.0), (0.5, 0.0), (0.5, 0.0), (0.0, 0.0)]  # (win, score): a win, two ties, a loss
    (val / "2.jsonl").write_text("".join(json.dumps({"input": "p", "output": "o", "gts": "1", "score": s,
                                                     "step": 2, "win": w}) + "\n" for w, s in rows))
    log_steps(job, [1, 2])
    sync_job(job)
    assert points(job, "val-core/default/win_rate_wins") == {2: 1}
    assert points(job, "val-core/default/win_rate_ties") == {2: 2}
    assert points(job, "val-core/default/win_rate_losses") == {2: 1}
    assert points(job, "val-core/default/accuracy") == {2: 0.25}
    assert points(job, "val-core/default/win_rate") == {2: 0.5}
    assert points(job) == {1: 0.1, 2: 0.2}


def test_exit_zero_succeeds_nonzero_fails_with_log_tail(running_job, project, engineer, prompts_version, tiny_model,
                                                        reward_spec, fake_supervisor):
    job = running_job
    log_steps(job, [1, 2])
    (adir(job) / "exit.json").write_text(json.dumps({"returncode": 0, "cancelled": False, "ended_at": time.time()}))
    sync_job(job)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED and job.finished_at and points(job) == {1: 0.1, 2: 0.2}
    assert job.attempts.get().returncode == 0

    other = job_create(project=project, user=engineer, kind="grpo", backend="local", preset="demo-cpu",
                       hp_overrides={}, dataset_version=prompts_version, reward_spec=reward_spec,
                       base_model=tiny_model, include_unreviewed=True)
    job_launch(other.pk)
    other.refresh_from_db()
    (adir(other) / "log.txt").write_text("loading\nTraceback (most recent call last):\nValueError: boom\n")
    (adir(other) / "exit.json").write_text(json.dumps({"returncode": 1, "cancelled": False, "ended_at": time.time()}))
    assert sync_active_jobs() >= 1
    other.refresh_from_db()
    assert other.state == JobState.FAILED and "ValueError: boom" in other.error and "exit code 1" in other.error


VERL_START = ("dataset len: 36\nfilter dataset len: 36\ndataset len: 6\nfilter dataset len: 6\n"
              "Size of train dataloader: 2, Size of val dataloader: 1\nTotal training steps: 2\n")


def test_a_run_that_ends_before_its_planned_steps_says_why(running_job, engineer, as_user):
    job = running_job
    Job.objects.filter(pk=job.pk).update(config={**job.config, "total_steps": 4})
    job.refresh_from_db()
    (adir(job) / "log.txt").write_text(VERL_START + "step:1 ...\nstep:2 ...\n")
    log_steps(job, [1, 2])
    (adir(job) / "exit.json").write_text(json.dumps({"returncode": 0, "cancelled": False, "ended_at": time.time()}))
    sync_job(job)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED
    assert job.error.startswith("Ended at step 2 of the 4 planned: the data gives 2 steps per epoch; "
                                "VERL planned 2 steps in all.")
    assert job.events.filter(kind="state", message__startswith="succeeded, ended at step 2 of the 4").exists()
    page = as_user(engineer).get(f"/p/{job.project.slug}/jobs/{job.pk}/").content.decode()
    assert 'id="job-ended-early"' in page and "Ended at step 2 of the 4 planned" in page


def test_a_run_that_reaches_its_planned_steps_just_succeeds(running_job):
    job = running_job
    log_steps(job, range(1, 11))
    (adir(job) / "exit.json").write_text(json.dumps({"returncode": 0, "cancelled": False, "ended_at": time.time()}))
    sync_job(job)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED and job.error == "" and job.last_step == 10


def test_cancel_ends_as_cancelled_when_the_supervisor_exits(running_job, engineer):
    from webapp.runs.services import job_cancel

    job = job_cancel(job=running_job, user=engineer)
    beat(job)
    sync_job(job)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    (adir(job) / "exit.json").write_text(json.dumps({"returncode": -15, "cancelled": True, "ended_at": time.time()}))
    sync_job(job)
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED


def test_stale_heartbeat_means_lost(running_job, settings):
    job = running_job
    beat(job, age=settings.RUN_HEARTBEAT_STALE_S + 5)
    sync_job(job)
    job.refresh_from_db()
    assert job.state == JobState.LOST and "heartbeat" in job.error
    assert job.attempts.get().state == JobState.LOST


def _ckpt(job, step, kl):
    path = Path(job.run_dir) / "checkpoints" / f"global_step_{step}"
    (path / "model").mkdir(parents=True)
    (path / "trainer_state.pt").write_bytes(b"x" * 10)
    (path / "manifest.json").write_text(json.dumps({"step": step, "format": "local", "kind": "grpo",
                                                    "metrics": {"actor/kl_loss": kl}, "lora": False}))
    (path.parent / "latest_checkpointed_iteration.txt").write_text(str(step))
    return path


def test_checkpoints_are_discovered_with_manifest_metrics_and_retention(running_job):
    job = running_job
    beat(job)
    _ckpt(job, 5, 0.01)
    sync_job(job)
    ck = Checkpoint.objects.get(job=job, step=5)
    assert ck.metrics == {"actor/kl_loss": 0.01} and ck.status == CheckpointStatus.AVAILABLE
    assert Path(ck.path).is_absolute() and ck.size_bytes >= 10
    _ckpt(job, 10, 0.02)
    import shutil

    shutil.rmtree(Path(ck.path))  # keep_last_k removed it
    sync_job(job)
    ck.refresh_from_db()
    assert ck.status == CheckpointStatus.DELETED
    assert job.checkpoints.filter(status=CheckpointStatus.AVAILABLE).get().step == 10
    assert job.events.filter(kind="checkpoint").count() == 2


def test_later_attempt_overwrites_steps_of_an_earlier_one(running_job, engineer, settings):
    job = running_job
    beat(job)
    log_steps(job, [1, 2, 3, 4], score=lambda s: 0.0)
    _ckpt(job, 2, 0.01)
    sync_job(job)
    beat(job, age=settings.RUN_HEARTBEAT_STALE_S + 5)  # the worker died after step 4
    sync_job(job)
    job.refresh_from_db()
    assert job.state == JobState.LOST
    attempt = job_resume(job=job, user=engineer)
    assert attempt.resume_from.endswith("global_step_2")
    assert job_launch(job.pk) == "launched"
    job.refresh_from_db()
    beat(job, k=2)
    log_steps(job, [3, 4, 5], k=2, score=lambda s: 1.0)
    sync_job(job)
    assert points(job) == {1: 0.0, 2: 0.0, 3: 1.0, 4: 1.0, 5: 1.0}
    assert MetricPoint.objects.get(job=job, name="critic/score/mean", step=3).attempt == 2
    # an earlier attempt re-read from scratch (offsets lost) never overwrites the later attempt's points
    JobAttempt.objects.filter(job=job, number=1).update(state=JobState.RUNNING, ingest={})
    beat(job, k=1)
    sync_job(job)
    assert points(job)[3] == 1.0


def test_subscribers_of_job_synced_get_the_new_points(running_job):
    seen = []

    def receiver(sender, *, job, new_points, **kw):
        seen.append((job.pk, sorted(p.step for p in new_points)))

    job_synced.connect(receiver)
    try:
        beat(running_job)
        log_steps(running_job, [1, 2])
        sync_job(running_job)
        sync_job(running_job)
    finally:
        job_synced.disconnect(receiver)
    assert seen == [(running_job.pk, [1, 1, 2, 2]), (running_job.pk, [])]


def test_a_broken_subscriber_does_not_stop_ingestion(running_job):
    calls = []

    def boom(sender, **kw):
        calls.append(1)
        raise RuntimeError("monitoring bug")

    job_synced.connect(boom)
    try:
        beat(running_job)
        log_steps(running_job, [1])
        sync_job(running_job)
    finally:
        job_synced.disconnect(boom)
    assert calls == [1]
    assert points(running_job) == {1: 0.1}
