"""A run directory belongs to exactly one job, even when a database id repeats (reset, restore, shared volume)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.conf import settings

from webapp.runs.models import Job, JobState, MetricPoint
from webapp.runs.services import job_create, job_launch
from webapp.runs.services.launch import resume_target
from webapp.runs.services.start import own_run_dir
from webapp.runs.services.sync import sync_job

pytestmark = pytest.mark.django_db


def _create(project, user, version, model, spec):
    return job_create(project=project, user=user, kind="grpo", backend="local", preset="demo-cpu",
                      hp_overrides={"max_steps": 10}, dataset_version=version, reward_spec=spec, base_model=model,
                      include_unreviewed=True)


def _leave_an_old_run(run_dir: Path) -> None:
    """What an older job with the same id left: 300 metric lines, a checkpoint, its own spec."""
    (run_dir / "attempts" / "1").mkdir(parents=True)
    (run_dir / "attempts" / "1" / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "data": {"reward": 0.5}}) + "\n" for s in range(300)))
    (run_dir / "checkpoints" / "global_step_300").mkdir(parents=True)
    (run_dir / "checkpoints" / "global_step_300" / "manifest.json").write_text('{"step": 300, "format": "local"}')
    (run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("300")
    (run_dir / "job.json").write_text('{"job_id": "old"}')


def test_a_new_job_never_uses_the_folder_an_older_job_with_its_id_left(project, engineer, prompts_version,
                                                                        tiny_model, reward_spec, no_enqueue,
                                                                        fake_supervisor):
    job = _create(project, engineer, prompts_version, tiny_model, reward_spec)
    old = Path(settings.RUNS_ROOT) / project.slug / str(job.pk)  # where job ids alone used to lead
    _leave_an_old_run(old)
    assert job_launch(job.pk) == "launched"
    job.refresh_from_db()
    run_dir = Path(job.run_dir)
    assert run_dir.parent == old.parent.resolve() and run_dir != old.resolve()
    assert sorted(p.name for p in run_dir.iterdir()) == ["attempts", "data", "job.json", "reward"]
    assert json.loads((run_dir / "job.json").read_text())["job_id"] == str(job.pk)
    assert (old / "job.json").read_text() == '{"job_id": "old"}'  # the old run is untouched
    sync_job(job)
    job.refresh_from_db()
    assert not MetricPoint.objects.filter(job=job).exists() and not job.checkpoints.exists()
    Job.objects.filter(pk=job.pk).update(state=JobState.LOST)
    job.refresh_from_db()
    assert resume_target(job) is None  # nothing to resume from: the old checkpoint is not this job's


def test_the_same_id_after_a_database_reset_gets_a_fresh_empty_folder(project, engineer, prompts_version,
                                                                      tiny_model, reward_spec, no_enqueue,
                                                                      fake_supervisor):
    job = _create(project, engineer, prompts_version, tiny_model, reward_spec)
    job_launch(job.pk)
    job.refresh_from_db()
    first = Path(job.run_dir)
    # The database forgets the job (reset/restore) and a new job gets the same id.
    Job.objects.filter(pk=job.pk).update(run_dir="")
    twin = Job.objects.get(pk=job.pk)
    second = own_run_dir(twin)
    assert second != first and second.name.startswith(f"{job.pk}-") and list(second.iterdir()) == []
    assert Job.objects.get(pk=job.pk).run_dir == str(second)  # stored on the job: later attempts reuse it
    assert own_run_dir(Job.objects.get(pk=job.pk)) == second
