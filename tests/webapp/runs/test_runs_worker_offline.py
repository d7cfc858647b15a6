"""'Worker offline' on the run pages (monitor and job detail) and in the live poll while no worker beats."""
from __future__ import annotations

import pytest

from webapp.core import workers
from webapp.runs.services import job_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(project, engineer, prompts_version, tiny_model, reward_spec, no_enqueue):
    return job_create(project=project, user=engineer, kind="grpo", backend="local", preset="demo-cpu",
                      hp_overrides={"max_steps": 10}, dataset_version=prompts_version, reward_spec=reward_spec,
                      base_model=tiny_model, include_unreviewed=True)


def test_run_pages_say_worker_offline_until_a_worker_beats(settings, tmp_path, project, viewer, job, as_user,
                                                           api_for):
    settings.WORKER_HEARTBEAT_DIR = tmp_path / "heartbeats"
    client = as_user(viewer)
    pages = [f"/p/{project.slug}/jobs/{job.pk}/"]
    live = f"/api/projects/{project.slug}/monitor/jobs/{job.pk}/live/"
    for url in pages:
        html = client.get(url).content.decode()
        assert 'id="worker-offline" role="status">' in html and "Worker offline" in html, url
    assert api_for(viewer).get(live).json()["worker_online"] is False
    workers.beat("celery@w", {})
    for url in pages:
        assert 'id="worker-offline" role="status" hidden>' in client.get(url).content.decode(), url
    assert api_for(viewer).get(live).json()["worker_online"] is True
