"""Fixtures for the runs tests: tiny models, demo datasets, the exact-match reward, fake supervisors."""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from webapp.datasets.models import Dataset, DatasetKind, DatasetRow, DatasetVersion, VersionStatus
from webapp.registry.models import ModelEntry, ModelKind


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A random tiny causal LM over the demo vocabulary (built in ~0.1 s)."""
    from training.demo import DEMO_VOCAB
    from training.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("models") / "tiny", vocab=DEMO_VOCAB, hidden=32, layers=1,
                            max_positions=32)


@pytest.fixture(scope="session")
def tiny_rm_dir(tmp_path_factory) -> Path:
    from training.demo import DEMO_VOCAB
    from training.models import build_tiny_reward_model

    return build_tiny_reward_model(tmp_path_factory.mktemp("models") / "tiny-rm", vocab=DEMO_VOCAB, hidden=32,
                                   layers=1, max_positions=32)


@pytest.fixture(scope="session")
def demo_model_dir(tmp_path_factory) -> Path:
    """The real demo policy (format warm-up included; ~6 s once per session)."""
    import torch

    from training.demo import build_demo_model

    torch.set_num_threads(1)
    return build_demo_model(tmp_path_factory.mktemp("models") / "demo-tiny")


def _rows(version, kind: str, rows: list[dict], split: str) -> list[DatasetRow]:
    start = version.rows.count()
    objs = []
    for i, r in enumerate(rows, start):
        prompt = r.get("prompt")
        objs.append(DatasetRow(
            version=version, index=i, source_line=i + 1, split=split, data_source=r.get("data_source", ""),
            ability=r.get("ability", ""), prompt=prompt, chosen=r.get("chosen"), rejected=r.get("rejected"),
            ground_truth=r.get("ground_truth", ""), extra_info=r.get("extra_info") or {},
            prompt_text=str(prompt), prompt_chars=len(str(prompt)), chosen_text=str(r.get("chosen") or ""),
            rejected_text=str(r.get("rejected") or ""), row_hash=hashlib.sha256(f"{kind}{split}{i}".encode())
            .hexdigest()))
    return DatasetRow.objects.bulk_create(objs)


def make_version(project, name: str, kind: str, train: list[dict], val: list[dict]) -> DatasetVersion:
    dataset = Dataset.objects.create(project=project, name=name, kind=kind)
    version = DatasetVersion.objects.create(dataset=dataset, number=1, status=VersionStatus.READY,
                                            content_hash=hashlib.sha256(name.encode()).hexdigest(),
                                            row_count=len(train) + len(val), train_count=len(train),
                                            val_count=len(val))
    _rows(version, kind, train, "train")
    _rows(version, kind, val, "val")
    return version


@pytest.fixture
def prompts_version(project):
    from training.demo import arithmetic_rows

    return make_version(project, "arith", DatasetKind.PROMPTS, arithmetic_rows("train"), arithmetic_rows("val")[:8])


@pytest.fixture
def prefs_version(project):
    from training.demo import preference_rows

    return make_version(project, "prefs", DatasetKind.PREFERENCE, preference_rows(40, seed=0),
                        preference_rows(8, seed=1))


@pytest.fixture
def reward_fn(project):
    from training.demo import EXACT_MATCH_SOURCE
    from webapp.rewards.services import reward_function_create

    return reward_function_create(project=project, user=None, name="exact-match", source=EXACT_MATCH_SOURCE)


@pytest.fixture
def reward_spec(reward_fn):
    return {"shaping": "raw", "components": [{"type": "function", "version_id": reward_fn.latest_version.pk,
                                              "weight": 1.0}]}


@pytest.fixture
def tiny_model(project, tiny_model_dir):
    return ModelEntry.objects.create(project=project, name="tiny", kind=ModelKind.CAUSAL_LM, path=str(tiny_model_dir))


@pytest.fixture
def teacher_model(project, tiny_model_dir):
    return ModelEntry.objects.create(project=project, name="teacher", kind=ModelKind.CAUSAL_LM,
                                     path=str(tiny_model_dir))


@pytest.fixture
def rm_model(project, tiny_rm_dir):
    return ModelEntry.objects.create(project=project, name="tiny-rm", kind=ModelKind.REWARD_MODEL,
                                     path=str(tiny_rm_dir))


@pytest.fixture
def no_enqueue(monkeypatch):
    """Record launch enqueues instead of sending them to the broker."""
    calls = []
    monkeypatch.setattr("webapp.runs.services.events.enqueue_launch",
                        lambda job_id, queue, countdown=None: calls.append((job_id, queue, countdown)))
    return calls


@pytest.fixture
def fake_supervisor(monkeypatch):
    """spawn_supervisor that starts nothing: records the attempt dirs and returns a fake pid."""
    spawned = []

    def spawn(attempt_dir, python=None):
        spawned.append(Path(attempt_dir))
        return 424242

    monkeypatch.setattr("training.supervisor.spawn_supervisor", spawn)
    return spawned


def copy_model(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst
