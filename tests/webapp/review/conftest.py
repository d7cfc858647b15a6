"""Review test data: ready dataset versions built directly with the ORM (the import lives in the datasets app)."""
from __future__ import annotations

import pytest

from webapp.datasets.models import Dataset, DatasetRow, DatasetVersion


def make_version(project, *, name="prefs", kind="preference", rows=8, status="ready", sources=("math", "code")):
    dataset = Dataset.objects.create(project=project, name=name, kind=kind)
    version = DatasetVersion.objects.create(dataset=dataset, number=1, status=status, row_count=rows)
    objs = []
    for i in range(rows):
        if kind == "preference":
            objs.append(DatasetRow(version=version, index=i, split="val" if i % 4 == 3 else "train",
                                   data_source=sources[i % len(sources)], prompt=f"Question {i}?",
                                   chosen=f"Good answer {i}", rejected=f"Bad answer {i}",
                                   prompt_text=f"Question {i}?", chosen_text=f"Good answer {i}",
                                   rejected_text=f"Bad answer {i}", row_hash=f"h{i}"))
        else:
            objs.append(DatasetRow(version=version, index=i, split="train", data_source="arith", ability="math",
                                   prompt=[{"role": "user", "content": f"{i}+1="}], ground_truth=str(i + 1),
                                   extra_info={"i": i}, prompt_text=f"{i}+1=", row_hash=f"p{i}"))
    DatasetRow.objects.bulk_create(objs)
    return version


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    # The persona fixtures hash passwords; the default PBKDF2 costs ~0.3 s per user on this machine.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def version(project):
    return make_version(project)


@pytest.fixture
def make():
    return make_version
