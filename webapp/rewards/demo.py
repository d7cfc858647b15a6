"""Demo content: the "exact-match" reward function (version 1) used by the demo GRPO job."""
from __future__ import annotations

from collections.abc import Callable

from webapp.rewards.models import RewardFunction
from webapp.rewards.services import reward_function_create

DEMO_REWARD_NAME = "exact-match"


def demo_reward_source() -> str:
    """The demo job's reward (training.demo's, so that the demo learns)."""
    from training.demo import EXACT_MATCH_SOURCE  # here: training.demo imports torch, which pages never need

    return EXACT_MATCH_SOURCE


def seed_demo(*, project, user, log: Callable[[str], None] = print) -> RewardFunction:
    existing = RewardFunction.objects.filter(project=project, name=DEMO_REWARD_NAME).first()
    if existing is not None:
        return existing
    function = reward_function_create(
        project=project, user=user, name=DEMO_REWARD_NAME, source=demo_reward_source(),
        description="1.0 when the response, trimmed, equals the ground truth (the demo's sums); else 0.0.",
        message="Demo exact-match reward")
    log(f"created reward function {DEMO_REWARD_NAME} v1")
    return function
