from __future__ import annotations

import pytest

from webapp.rewards.demo import DEMO_REWARD_NAME, demo_reward_source, seed_demo
from webapp.rewards.models import RewardFunction

pytestmark = pytest.mark.django_db


def test_seed_demo_is_idempotent_and_uses_the_demo_reward(project, admin_user):
    logs: list[str] = []
    first = seed_demo(project=project, user=admin_user, log=logs.append)
    second = seed_demo(project=project, user=admin_user, log=logs.append)
    assert first == second and RewardFunction.objects.filter(project=project).count() == 1
    v = first.latest_version
    assert first.name == DEMO_REWARD_NAME and v.number == 1 and v.source == demo_reward_source()
    assert "compute_score" in v.source and logs == [f"created reward function {DEMO_REWARD_NAME} v1"]
