"""Fixtures of the reward tests: ready dataset versions with real rows, and a saved reward function."""
from __future__ import annotations

import hashlib

import pytest

from webapp.datasets.models import Dataset, DatasetKind, DatasetRow, DatasetVersion, VersionStatus

EXACT = '''\
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return 1.0 if str(solution_str).strip() == str(ground_truth).strip() else 0.0
'''


@pytest.fixture(autouse=True)
def _test_runs_at_once(request, monkeypatch):
    """Test-runs queued here are run at once, by the same service the worker's task calls (these tests run in a
    transaction that never commits); tests that start a real worker (`celery_worker_proc`) go through it."""
    if "celery_worker_proc" in request.fixturenames or "real_queue" in request.fixturenames:
        return
    from types import SimpleNamespace

    from django.db import transaction

    from webapp.rewards import scoring

    monkeypatch.setattr(scoring, "transaction", SimpleNamespace(atomic=transaction.atomic,
                                                                on_commit=lambda fn, **kw: fn()))
    monkeypatch.setattr(scoring, "_enqueue", lambda run_id: scoring.reward_test_run_execute(run_id=run_id))


@pytest.fixture
def real_queue():
    """Marks a test that sees test-runs queued as in production (nothing runs them unless it does)."""


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    """The personas are created with passwords; a fast hasher keeps these tests quick on 2 cores."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def make_dataset(project, name: str, kind: str, rows: list[dict]) -> DatasetVersion:
    dataset = Dataset.objects.create(project=project, name=name, kind=kind)
    version = DatasetVersion.objects.create(dataset=dataset, number=1, status=VersionStatus.READY,
                                            row_count=len(rows), progress=1.0)
    DatasetRow.objects.bulk_create([
        DatasetRow(version=version, index=i, source_line=i + 1, split=row.get("split", "train"),
                   data_source=row.get("data_source", ""), prompt=row.get("prompt", ""),
                   prompt_text=row.get("prompt", ""), chosen=row.get("chosen"), rejected=row.get("rejected"),
                   chosen_text=row.get("chosen") or "", rejected_text=row.get("rejected") or "",
                   ground_truth=row.get("ground_truth", ""), extra_info=row.get("extra_info", {}),
                   row_hash=hashlib.sha256(f"{name}{i}".encode()).hexdigest())
        for i, row in enumerate(rows)])
    return version


@pytest.fixture
def arith(project) -> DatasetVersion:
    """Six prompt rows "a+b=" with the sum as ground truth; rows 4 and 5 are in the val split."""
    rows = [{"prompt": f"{a}+{b}=", "ground_truth": str(a + b), "data_source": "demo/arith",
             "split": "val" if i >= 4 else "train"} for i, (a, b) in enumerate([(1, 2), (2, 2), (3, 4), (0, 5),
                                                                              (4, 4), (5, 1)])]
    return make_dataset(project, "arith", DatasetKind.PROMPTS, rows)


@pytest.fixture
def prefs(project) -> DatasetVersion:
    """Three preference pairs: chosen is the right sum, rejected a wrong one."""
    rows = [{"prompt": "1+2=", "chosen": "3", "rejected": "4"},
            {"prompt": "2+2=", "chosen": "4", "rejected": "five"},
            {"prompt": "3+3=", "chosen": "6", "rejected": "6 "}]
    return make_dataset(project, "prefs", DatasetKind.PREFERENCE, rows)


@pytest.fixture
def reward_fn(project, engineer):
    from webapp.rewards.services import reward_function_create

    return reward_function_create(project=project, user=engineer, name="exact", source=EXACT, message="first")


@pytest.fixture
def exact_source() -> str:
    return EXACT


@pytest.fixture
def dataset_factory(project):
    """`dataset_factory(name, kind, rows)` -> a ready DatasetVersion of the test project."""
    return lambda name, kind, rows: make_dataset(project, name, kind, rows)
