"""The demo seeding makes review states for the demo's preference data, once."""
from __future__ import annotations

import pytest

from webapp.review.demo import seed_demo
from webapp.review.models import PairState

pytestmark = pytest.mark.django_db


def test_seed_demo_is_idempotent(project, admin_user, make):
    version = make(project, name="demo-prefs", rows=5)
    make(project, name="demo-prompts", kind="prompts", rows=3)
    lines: list[str] = []
    seed_demo(project=project, user=admin_user, log=lines.append)
    seed_demo(project=project, user=admin_user, log=lines.append)
    assert PairState.objects.filter(version=version).count() == 5
    assert PairState.objects.count() == 5  # prompt sets are not reviewed
    assert lines == ["review: 5 pairs of demo-prefs v1 ready for review"]
