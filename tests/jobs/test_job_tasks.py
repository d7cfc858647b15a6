"""The launch task: routed per job to the cpu/gpu queue, thin; and the demo GRPO job end to end on a real worker."""
from __future__ import annotations

import hashlib
import statistics
import time
from pathlib import Path

import pytest
from celery import current_app

from jobs.tasks import launch_job
from webapp.registry.models import ModelEntry, ModelKind
from webapp.runs.models import Job, JobState, MetricPoint

SCORE = "critic/score/mean"


def _demo_inputs(project, model_dir: Path):
    """A prompts dataset version of the demo sums, the exact-match reward and the demo model (committed)."""
    from training.demo import EXACT_MATCH_SOURCE, arithmetic_rows
    from webapp.datasets.models import Dataset, DatasetKind, DatasetRow, DatasetVersion, VersionStatus
    from webapp.rewards.services import reward_function_create

    dataset = Dataset.objects.create(project=project, name="arith", kind=DatasetKind.PROMPTS)
    version = DatasetVersion.objects.create(dataset=dataset, number=1, status=VersionStatus.READY, row_count=44)
    rows = [("train", r) for r in arithmetic_rows("train")] + [("val", r) for r in arithmetic_rows("val")[:8]]
    DatasetRow.objects.bulk_create([
        DatasetRow(version=version, index=i, split=split, data_source=r["data_source"], ability=r["ability"],
                   prompt=r["prompt"], ground_truth=r["ground_truth"], extra_info=r["extra_info"],
                   prompt_text=r["prompt"], prompt_chars=len(r["prompt"]),
                   row_hash=hashlib.sha256(f"{split}{i}".encode()).hexdigest())
        for i, (split, r) in enumerate(rows)])
    fn = reward_function_create(project=project, user=None, name="exact-match", source=EXACT_MATCH_SOURCE)
    model = ModelEntry.objects.create(project=project, name="demo-tiny", kind=ModelKind.CAUSAL_LM, path=str(model_dir))
    spec = {"shaping": "raw", "components": [{"type": "function", "version_id": fn.latest_version.pk, "weight": 1.0}]}
    return version, model, spec


def test_launch_is_routed_per_job_and_the_task_is_one_service_call(monkeypatch):
    from webapp.runs.services import events, plan, start

    sent = []
    monkeypatch.setattr(current_app, "send_task", lambda name, **kw: sent.append((name, kw)))
    events.enqueue_launch(7, "gpu")
    events.enqueue_launch(8, "cpu", countdown=2)
    assert sent == [(launch_job.name, {"args": [7], "queue": "gpu", "countdown": None}),
                    (launch_job.name, {"args": [8], "queue": "cpu", "countdown": 2})]
    assert plan.job_queue("verl", {"device": "auto"}) == "gpu"
    assert plan.job_queue("verl", {"device": "cpu"}) == "cpu"  # the CPU rehearsal
    assert plan.job_queue("local", {"device": "cuda"}) == "gpu"
    assert plan.job_queue("local", {"device": "auto"}) == "cpu"
    assert plan.job_queue("verl", {"device": "cpu"}) == "cpu"  # VERL rehearsed on CPU
    calls = []
    monkeypatch.setattr(start, "job_launch", lambda job_id: calls.append(job_id) or "launched")
    assert launch_job.run(5) == "launched" and calls == [5]


@pytest.mark.django_db
def test_launch_task_skips_a_job_that_is_not_queued(project):
    job = Job.objects.create(project=project, name="x", kind="grpo", state=JobState.CANCELLED)
    assert launch_job.run(job.pk) == "skipped"


@pytest.fixture(scope="module")
def demo_model_dir(tmp_path_factory):
    import torch

    from training.demo import build_demo_model

    torch.set_num_threads(1)
    return build_demo_model(tmp_path_factory.mktemp("models") / "demo-tiny")


@pytest.mark.worker
@pytest.mark.slow
def test_demo_grpo_job_on_a_real_worker_learns(celery_worker_proc, demo_model_dir, django_user_model):
    from webapp.core.models import Membership, Project, Role
    from webapp.runs.services import job_create, sync_active_jobs

    project = Project.objects.create(slug="demo-e2e", name="Demo e2e")
    user = django_user_model.objects.create_user(username="eve", password="x")
    Membership.objects.create(project=project, user=user, role=Role.ENGINEER)
    version, model, spec = _demo_inputs(project, demo_model_dir)
    # job_create commits and enqueues on commit: the worker claims the job and starts its supervisor.
    job = job_create(project=project, user=user, kind="grpo", backend="local", preset="demo-cpu",
                     hp_overrides={"max_steps": 100, "save_freq": 50, "test_freq": 50}, dataset_version=version,
                     reward_spec=spec, base_model=model)
    deadline = time.time() + 240
    while time.time() < deadline:
        sync_active_jobs()
        job.refresh_from_db()
        if job.state in (JobState.SUCCEEDED, JobState.FAILED, JobState.LOST, JobState.CANCELLED):
            break
        time.sleep(1)
    log = Path(job.run_dir, "attempts", "1", "log.txt") if job.run_dir else None
    detail = (log.read_text()[-3000:] if log and log.exists() else "") + celery_worker_proc.log_path.read_text()[-3000:]
    assert job.state == JobState.SUCCEEDED, f"{job.state}: {job.error}\n{detail}"
    assert job.attempts.get().host and job.queue == "cpu"
    scores = dict(MetricPoint.objects.filter(job=job, name=SCORE).values_list("step", "value"))
    assert sorted(scores) == list(range(1, 101))
    early = statistics.mean(scores[s] for s in range(1, 11))
    late = statistics.mean(scores[s] for s in range(91, 101))
    assert early < 0.25 and late > 0.35 and late > early + 0.15, (early, late)
    assert set(job.checkpoints.values_list("step", flat=True)) == {50, 100}
    assert job.checkpoints.get(step=100).metrics.get(SCORE) is not None
    assert job.last_step == 100 and job.finished_at is not None
