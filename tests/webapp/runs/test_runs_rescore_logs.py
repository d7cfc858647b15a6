"""A re-score keeps what the new reward version printed for each sample, shown beside its new score."""
from __future__ import annotations

import os

import pytest

from tests.webapp.demo_run import train_demo_job
from webapp.rewards.models import RewardFunction
from webapp.rewards.services import reward_version_save
from webapp.runs.models import Rescore
from webapp.runs.services import rescore as service

pytestmark = pytest.mark.django_db

TALKATIVE = '''\
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    if solution_str.strip() == str(ground_truth).strip():
        print("right: " + solution_str.strip())
        return 1.0
    return 0.0
'''


def test_a_rescore_keeps_each_samples_printed_output(project, engineer, viewer, tiny_model_dir, no_enqueue,
                                                    fake_supervisor, as_user, api_for):
    job = train_demo_job(project, engineer, tiny_model_dir)
    fn = RewardFunction.objects.get(project=project, name="exact-match")
    version = reward_version_save(function=fn, user=engineer, source=TALKATIVE, message="talks").version
    rescore = service.rescore_create(job=job, user=engineer, version=version, steps=[2], component="", queue=False)
    service.rescore_execute(rescore_id=rescore.pk)
    rescore = Rescore.objects.get(pk=rescore.pk)
    assert rescore.state == "succeeded"
    right = [s for s in rescore.samples.all() if s.new_score == 1.0]
    assert right and all(s.log == f"right: {s.response.strip()}\n" for s in right)
    assert all(s.log == "" for s in rescore.samples.all() if s.new_score == 0.0)
    page = as_user(viewer).get(f"/p/{project.slug}/jobs/{job.pk}/rescores/{rescore.pk}/", {"show": "all"})
    html = page.content.decode()
    assert 'class="reward-log"><summary>printed</summary><pre>right: ' in html
    api = api_for(viewer).get(f"/api/projects/{project.slug}/jobs/{job.pk}/rescores/{rescore.pk}/").json()
    assert any(s["log"].startswith("right: ") for s in api["samples"])


def test_a_rescore_where_the_sandbox_cannot_isolate_fails_and_says_why(project, engineer, tiny_model_dir, no_enqueue,
                                                                       fake_supervisor, broken_bwrap, monkeypatch):
    from training.sandbox import isolation

    broken_path = os.environ["PATH"]
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")  # the run trained where bubblewrap worked
    isolation.forget_probe()
    job = train_demo_job(project, engineer, tiny_model_dir)
    fn = RewardFunction.objects.get(project=project, name="exact-match")
    version = reward_version_save(function=fn, user=engineer, source=TALKATIVE, message="talks").version
    monkeypatch.setenv("PATH", broken_path)  # now it does not
    isolation.forget_probe()
    rescore = service.rescore_create(job=job, user=engineer, version=version, steps=[2], component="", queue=False)
    service.rescore_execute(rescore_id=rescore.pk)
    rescore = Rescore.objects.get(pk=rescore.pk)
    assert rescore.state == "failed" and "Reward code was not run" in rescore.error
    assert "apt-get install bubblewrap" in rescore.error and not rescore.samples.exists()
