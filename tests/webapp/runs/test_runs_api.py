"""Jobs API: create (same fields as the CLI), dry run, list/detail, cancel, resume, models; access per role."""
from __future__ import annotations

from pathlib import Path

import pytest

from webapp.runs.models import Job, JobState

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo_inputs(prompts_version, tiny_model, reward_fn):
    return {"kind": "grpo", "preset": "demo-cpu", "dataset": "arith:1", "model": "tiny", "reward": ["exact-match"],
            "include_unreviewed": True, "set": {"max_steps": 10, "lr": "5e-4"}}


def api_url(project, tail=""):
    return f"/api/projects/{project.slug}/jobs/{tail}"


def test_create_list_detail_cancel(project, engineer, viewer, api_for, demo_inputs, no_enqueue):
    api = api_for(engineer)
    resp = api.post(api_url(project), demo_inputs, format="json")
    assert resp.status_code == 201, resp.json()
    body = resp.json()
    job = Job.objects.get(pk=body["id"])
    assert body["state"] == "queued" and body["config"]["hp"]["lr"] == 5e-4 and body["total_steps"] == 10
    assert job.created_by == engineer and job.reward_versions.count() == 1
    listing = api_for(viewer).get(api_url(project)).json()
    assert [j["id"] for j in listing] == [job.pk]
    assert api_for(viewer).get(api_url(project, f"{job.pk}/")).json()["data_manifest"]["counts"]["train"] == 36
    resp = api.post(api_url(project, f"{job.pk}/cancel/"))
    assert resp.status_code == 200 and resp.json()["state"] == "cancelled"
    resp = api.post(api_url(project, f"{job.pk}/cancel/"))
    assert resp.status_code == 400 and "already cancelled" in resp.json()["detail"]


def test_create_refusals_are_400_with_field_errors(project, engineer, api_for, demo_inputs, no_enqueue):
    api = api_for(engineer)
    resp = api.post(api_url(project), {**demo_inputs, "set": {"group_size": 1, "batch_size": 10,
                                                              "mini_batch_size": 4}}, format="json")
    assert resp.status_code == 400
    body = resp.json()
    assert "group_size" in body["errors"] and "batch_size" in body["errors"]
    resp = api.post(api_url(project), {**demo_inputs, "dataset": "nope"}, format="json")
    assert resp.status_code == 400 and "No dataset named 'nope'" in resp.json()["detail"]
    resp = api.post(api_url(project), {**demo_inputs, "kind": "dpo"}, format="json")
    assert resp.status_code == 400
    assert Job.objects.count() == 0


def test_dry_run_creates_nothing(project, engineer, api_for, demo_inputs, no_enqueue):
    gpu = {"device": "cuda", "verl.rollout_engine": "vllm"}
    resp = api_for(engineer).post(api_url(project), {**demo_inputs, "backend": "verl", "dry_run": True, "set": gpu},
                                  format="json")
    assert resp.status_code == 200, resp.json()
    body = resp.json()
    assert "actor_rollout_ref.actor.optim.lr=0.001" in body["command"].splitlines()
    assert body["run_dir"].endswith(f"/{project.slug}/1-xxxxxxxxxxxx") and "kind: grpo" in body["config_yaml"]
    assert Job.objects.count() == 0 and no_enqueue == []


def test_resume_endpoint(project, engineer, api_for, demo_inputs, no_enqueue, fake_supervisor):
    from webapp.runs.models import Checkpoint, JobAttempt
    from webapp.runs.services import job_launch

    api = api_for(engineer)
    job = Job.objects.get(pk=api.post(api_url(project), demo_inputs, format="json").json()["id"])
    job_launch(job.pk)
    job.refresh_from_db()
    resp = api.post(api_url(project, f"{job.pk}/resume/"), {}, format="json")
    assert resp.status_code == 400  # still running
    Job.objects.filter(pk=job.pk).update(state=JobState.FAILED)
    JobAttempt.objects.filter(job=job).update(state=JobState.FAILED)
    (Path(job.run_dir) / "checkpoints" / "global_step_5").mkdir(parents=True)
    Checkpoint.objects.create(job=job, step=5, path=f"{job.run_dir}/checkpoints/global_step_5")
    resp = api.post(api_url(project, f"{job.pk}/resume/"), {"checkpoint_step": 7}, format="json")
    assert resp.status_code == 400 and "No checkpoint at step 7" in resp.json()["detail"]
    resp = api.post(api_url(project, f"{job.pk}/resume/"), {"checkpoint_step": 5, "set": {"lr": 1e-4}},
                    format="json")
    assert resp.status_code == 202 and resp.json()["number"] == 2
    job.refresh_from_db()
    assert job.state == JobState.QUEUED and job.config["hp"]["lr"] == 1e-4


def test_models_endpoint(project, engineer, viewer, api_for, tiny_model_dir, settings):
    settings.MODEL_ROOTS = [str(tiny_model_dir.parent)]
    resp = api_for(engineer).post(api_url(project, "models/"), {"name": "m", "path": str(tiny_model_dir)},
                                  format="json")
    assert resp.status_code == 201 and resp.json()["kind"] == "causal_lm"
    resp = api_for(engineer).post(api_url(project, "models/"), {"name": "m", "path": str(tiny_model_dir)},
                                  format="json")
    assert resp.status_code == 400 and "already registered" in resp.json()["detail"]
    assert [m["name"] for m in api_for(viewer).get(api_url(project, "models/")).json()] == ["m"]


@pytest.mark.parametrize("method, tail", [("post", ""), ("post", "models/"), ("post", "{pk}/cancel/"),
                                          ("post", "{pk}/resume/")])
def test_writes_need_an_engineer(method, tail, project, engineer, reviewer, viewer, outsider, api_for, demo_inputs,
                                 no_enqueue):
    pk = api_for(engineer).post(api_url(project), demo_inputs, format="json").json()["id"]
    path = api_url(project, tail.format(pk=pk))
    for user, code in ((reviewer, 403), (viewer, 403), (outsider, 404)):
        assert getattr(api_for(user), method)(path, {}, format="json").status_code == code, (user.username, tail)
    assert Job.objects.get(pk=pk).state == JobState.QUEUED


@pytest.mark.parametrize("tail", ["", "models/", "{pk}/", "{pk}/log/"])
def test_reads_per_role(tail, project, engineer, reviewer, viewer, outsider, api_for, demo_inputs, no_enqueue):
    pk = api_for(engineer).post(api_url(project), demo_inputs, format="json").json()["id"]
    path = api_url(project, tail.format(pk=pk))
    for user, code in ((reviewer, 200), (viewer, 200), (outsider, 404)):
        assert api_for(user).get(path).status_code == code, (user.username, tail)
