"""The demo datasets: imported through the service, from training.demo's generators, idempotent."""
from __future__ import annotations

import pytest

from webapp.datasets.demo import ARITHMETIC, PREFERENCES, seed_demo
from webapp.datasets.models import DatasetRow, DatasetVersion

pytestmark = pytest.mark.django_db


def test_seed_demo_is_idempotent(project, admin_user):
    logs = []
    seed_demo(project=project, user=admin_user, log=logs.append)
    seed_demo(project=project, user=admin_user, log=logs.append)
    assert len(logs) == 2 and DatasetVersion.objects.count() == 2
    arith = DatasetVersion.objects.get(dataset__name=ARITHMETIC)
    assert arith.dataset.kind == "prompts" and arith.row_count == 36
    for row in DatasetRow.objects.filter(version=arith):
        a, b = row.prompt.rstrip("=").split("+")
        assert row.ground_truth == str(int(a) + int(b)) and row.data_source == "demo/arith"
    prefs = DatasetVersion.objects.get(dataset__name=PREFERENCES)
    assert prefs.dataset.kind == "preference" and prefs.row_count > 0
    wrong = [r for r in DatasetRow.objects.filter(version=prefs)
             if r.chosen != str(sum(int(x) for x in r.prompt.rstrip("=").split("+")))]
    assert wrong == [] and all(r.chosen != r.rejected for r in DatasetRow.objects.filter(version=prefs))
