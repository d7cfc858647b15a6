"""Demo content: the "exact-match" reward function (version 1) used by the demo GRPO job."""
from __future__ import annotations

from collections.abc import Callable

from training.reward_templates import get_template
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


# name -> (template, what to change in it, description): VERL's gsm8k scorer both ways, and the format alone.
SMOLLM2_REWARDS = {
    "gsm8k-strict": ("gsm8k_verl", None, "VERL's gsm8k scorer, strict: the number after '#### ' must equal the "
                                         "ground truth."),
    "gsm8k-flexible": ("gsm8k_verl", ('METHOD = "strict"', 'METHOD = "flexible"'),
                       "VERL's gsm8k scorer, flexible: the last number of the response must equal the ground truth."),
    "gsm8k-format": ("gsm8k_format", None, "1.0 when the response ends with '#### <number>' (format only)."),
}


def seed_smollm2(*, project, user, log: Callable[[str], None] = print) -> None:
    """The word problems' starter rewards, from the reward templates."""
    for name, (template, change, description) in SMOLLM2_REWARDS.items():
        if RewardFunction.objects.filter(project=project, name=name).exists():
            continue
        source = get_template(template)
        if change:
            source = source.replace(*change)
        reward_function_create(project=project, user=user, name=name, source=source, description=description,
                               message=f"Starter reward from the {template} template")
        log(f"created reward function {name} v1")
