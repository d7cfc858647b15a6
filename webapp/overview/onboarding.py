"""The project page's first steps (import → review → reward → launch), each done once or not yet."""
from __future__ import annotations

from dataclasses import dataclass

from webapp.datasets.models import DatasetVersion, VersionStatus
from webapp.review.models import PairState, Review, State
from webapp.rewards.models import RewardFunction
from webapp.runs.models import Job


@dataclass(frozen=True)
class Step:
    key: str
    title: str
    help: str
    url: str
    done: bool


def first_steps(project) -> list[Step]:
    base = f"/p/{project.slug}/"
    imported = DatasetVersion.objects.filter(dataset__project=project, status=VersionStatus.READY).exists()
    reviewed = (Review.objects.filter(version__dataset__project=project).exists()
                or PairState.objects.filter(version__dataset__project=project)
                .exclude(state=State.UNREVIEWED).exists())
    return [
        Step("import", "Import a dataset", "preference pairs to review, or prompts with answers to train on",
             base + "datasets/upload/", imported),
        Step("review", "Review preference pairs", "approve, swap or reject them with the keyboard",
             base + "review/", reviewed),
        Step("reward", "Write a reward function", "score a response against the answer, and test-run it",
             base + "rewards/new/", RewardFunction.objects.filter(project=project).exists()),
        Step("launch", "Launch a training job", "pick a preset, review the configuration, launch and watch it",
             base + "jobs/new/", Job.objects.filter(project=project).exists()),
    ]


def next_step(steps: list[Step]) -> Step | None:
    """The first step not done yet; None once each was done."""
    return next((s for s in steps if not s.done), None)
