"""A resume checks its checkpoint on disk first: a deleted folder is refused and the job stays as it was."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.webapp.runs.test_runs_api import api_url, demo_inputs  # noqa: F401 - a fixture
from webapp.core.services import ApplicationError
from webapp.runs.models import Checkpoint, Job, JobAttempt, JobState
from webapp.runs.services import job_launch, job_resume


@pytest.fixture
def finished_job(project, engineer, api_for, demo_inputs, no_enqueue, fake_supervisor):  # noqa: F811
    job = Job.objects.get(pk=api_for(engineer).post(api_url(project), demo_inputs, format="json").json()["id"])
    job_launch(job.pk)
    job.refresh_from_db()
    JobAttempt.objects.filter(job=job).update(state=JobState.SUCCEEDED)
    Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED, last_step=10)
    for step in (5, 10):
        path = Path(job.run_dir) / "checkpoints" / f"global_step_{step}"
        path.mkdir(parents=True)
        Checkpoint.objects.create(job=job, step=step, path=str(path))
    job.refresh_from_db()
    return job


def _unchanged(job):
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED and job.last_step == 10 and job.error == ""
    assert job.attempts.count() == 1


def test_resume_from_a_deleted_checkpoint_folder_is_refused(finished_job, engineer,
                                                           django_capture_on_commit_callbacks):
    shutil.rmtree(Path(finished_job.run_dir) / "checkpoints" / "global_step_10")
    with django_capture_on_commit_callbacks() as launches, \
            pytest.raises(ApplicationError, match="step 10 is missing on disk"):
        job_resume(job=finished_job, user=engineer)
    _unchanged(finished_job)
    assert launches == []


def test_the_api_refuses_it_with_a_400(finished_job, project, engineer, api_for):
    shutil.rmtree(Path(finished_job.run_dir) / "checkpoints" / "global_step_5")
    resp = api_for(engineer).post(api_url(project, f"{finished_job.pk}/resume/"), {"checkpoint_step": 5},
                                  format="json")
    assert resp.status_code == 400 and "step 5 is missing on disk" in resp.json()["detail"]
    _unchanged(finished_job)
    resp = api_for(engineer).post(api_url(project, f"{finished_job.pk}/resume/"), {"checkpoint_step": 10},
                                  format="json")
    assert resp.status_code == 202
