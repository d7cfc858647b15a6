"""Fixtures for the monitoring tests: runs with metric points and checkpoint folders on disk,
and (for the integration tests) jobs created and launched by the real runs services."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from django.conf import settings

from webapp.runs.models import Checkpoint, Job, JobKind, JobState, MetricPoint

T0 = 1_760_000_000.0


def default_config(**guard) -> dict:
    """A GRPO run's config with the KL guard on (the health rule "kl": restore with half the lr)."""
    return {"hp": {"lr": 1e-3, "kl_coef": 0.02, "keep_last_k": 2, "save_freq": 5, "test_freq": 5},
            "guard_rules": [{"rule": "kl", "threshold": 0.1, "patience": 2, "action": "restore", "lr_factor": 0.5,
                             "max_restores": 2, **guard}]}


@pytest.fixture
def make_job(project):
    """make_job(name="run", kind="grpo", state="running", config=None) -> Job with its own run dir."""
    def make(name: str = "run", kind: str = JobKind.GRPO, state: str = JobState.RUNNING, config: dict | None = None,
             project_=None, **fields) -> Job:
        job = Job.objects.create(project=project_ or project, name=name, kind=kind, state=state,
                                 config=config if config is not None else default_config(), **fields)
        run_dir = Path(settings.RUNS_ROOT) / f"job-{job.pk}"
        (run_dir / "checkpoints").mkdir(parents=True)
        job.run_dir = str(run_dir)
        job.save(update_fields=["run_dir"])
        return job
    return make


def add_points(job: Job, name: str, values, start_step: int = 1) -> list[MetricPoint]:
    points = [MetricPoint(job=job, step=start_step + i, name=name, value=v, wall_time=T0 + 10 * (start_step + i))
              for i, v in enumerate(values)]
    return MetricPoint.objects.bulk_create(points, batch_size=5000)


def add_checkpoint(job: Job, step: int, *, lora: bool = False, metrics: dict | None = None) -> Checkpoint:
    path = Path(job.run_dir) / "checkpoints" / f"global_step_{step}"
    model = path / "model"
    model.mkdir(parents=True)
    if lora:
        (model / "adapter_config.json").write_text(json.dumps({"r": 4}))
    else:
        (model / "config.json").write_text(json.dumps({"model_type": "fake", "step": step}))
    (path / "manifest.json").write_text(json.dumps({"step": step, "format": "local", "lora": lora}))
    return Checkpoint.objects.create(job=job, step=step, path=str(path), size_bytes=1234, metrics=metrics or {})


@pytest.fixture
def points():
    return add_points


@pytest.fixture
def checkpoint():
    return add_checkpoint


def write_samples(job: Job, step: int, rows: list[dict]) -> Path:
    path = Path(job.run_dir) / "samples" / "val" / f"{step}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def samples():
    return write_samples


# -- real runs services (integration) ------------------------------------------------------------

@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    from training.demo import DEMO_VOCAB
    from training.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("models") / "tiny", vocab=DEMO_VOCAB, hidden=32, layers=1,
                            max_positions=32)


@pytest.fixture
def no_enqueue(monkeypatch):
    calls = []
    monkeypatch.setattr("webapp.runs.services.events.enqueue_launch",
                        lambda job_id, queue, countdown=None: calls.append((job_id, queue, countdown)))
    return calls


@pytest.fixture
def fake_supervisor(monkeypatch):
    monkeypatch.setattr("training.supervisor.spawn_supervisor", lambda attempt_dir, python=None: 424242)


def job_inputs(project, model_dir: Path) -> dict:
    """A prompt dataset version (the demo sums), the exact-match reward and a registered model."""
    from training.demo import EXACT_MATCH_SOURCE, arithmetic_rows
    from webapp.datasets.models import Dataset, DatasetKind, DatasetRow, DatasetVersion, VersionStatus
    from webapp.registry.models import ModelEntry, ModelKind
    from webapp.rewards.services import reward_function_create

    dataset = Dataset.objects.create(project=project, name="arith", kind=DatasetKind.PROMPTS)
    train, val = arithmetic_rows("train"), arithmetic_rows("val")[:6]
    version = DatasetVersion.objects.create(dataset=dataset, number=1, status=VersionStatus.READY,
                                            content_hash=hashlib.sha256(b"arith").hexdigest(),
                                            row_count=len(train) + len(val), train_count=len(train),
                                            val_count=len(val))
    rows = []
    for i, (split, r) in enumerate([("train", r) for r in train] + [("val", r) for r in val]):
        rows.append(DatasetRow(version=version, index=i, source_line=i + 1, split=split, data_source=r["data_source"],
                               ability=r["ability"], prompt=r["prompt"], ground_truth=r["ground_truth"],
                               extra_info=r["extra_info"], prompt_text=r["prompt"], prompt_chars=len(r["prompt"]),
                               row_hash=hashlib.sha256(f"{split}{i}".encode()).hexdigest()))
    DatasetRow.objects.bulk_create(rows)
    fn = reward_function_create(project=project, user=None, name="exact-match", source=EXACT_MATCH_SOURCE)
    spec = {"shaping": "raw", "components": [{"type": "function", "version_id": fn.latest_version.pk, "weight": 1.0}]}
    model = ModelEntry.objects.create(project=project, name="tiny", kind=ModelKind.CAUSAL_LM, path=str(model_dir))
    return {"dataset_version": version, "reward_spec": spec, "base_model": model}


@pytest.fixture
def launched_job(project, engineer, tiny_model_dir, no_enqueue, fake_supervisor):
    """launched_job(**hp) -> a GRPO job created and launched by the runs services (no process runs)."""
    from webapp.runs.services import job_create, job_launch

    inputs = job_inputs(project, tiny_model_dir)

    def make(**hp) -> Job:
        job = job_create(project=project, user=engineer, kind="grpo", backend="local", preset="demo-cpu",
                         hp_overrides={"max_steps": 40, "lr": 1e-3, **hp}, include_unreviewed=True, **inputs)
        job_launch(job.pk)
        job.refresh_from_db()
        Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING)
        job.refresh_from_db()
        return job
    return make
