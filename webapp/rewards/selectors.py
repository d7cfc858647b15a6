"""Reads for the reward pages and API."""
from __future__ import annotations

from django.db.models import Count, QuerySet
from django.shortcuts import get_object_or_404

from training.reward_templates import list_templates
from webapp.core.models import Project
from webapp.datasets.models import DatasetVersion, VersionStatus
from webapp.registry.models import ModelEntry, ModelKind
from webapp.rewards.models import RewardFunction, RewardTestRun, RewardVersion


def reward_function_list(*, project: Project) -> QuerySet[RewardFunction]:
    return (RewardFunction.objects.filter(project=project)
            .annotate(version_count=Count("versions", distinct=True)).order_by("name"))


def reward_function_get(*, project: Project, pk: int) -> RewardFunction:
    return get_object_or_404(RewardFunction, project=project, pk=pk)


def reward_version_get(*, function: RewardFunction, number: int) -> RewardVersion:
    return get_object_or_404(RewardVersion, function=function, number=number)


def reward_versions(*, function: RewardFunction) -> QuerySet[RewardVersion]:
    return function.versions.select_related("author").order_by("-number")


def reward_test_runs(*, function: RewardFunction, limit: int = 20) -> QuerySet[RewardTestRun]:
    return (function.test_runs.select_related("version", "dataset_version__dataset", "created_by")
            .defer("results", "source").order_by("-created_at", "-id")[:limit])


def reward_test_run_get(*, project: Project, pk: int) -> RewardTestRun:
    return get_object_or_404(RewardTestRun.objects.select_related("function", "version", "dataset_version__dataset"),
                             function__project=project, pk=pk)


def testable_dataset_versions(*, project: Project):
    """Ready dataset versions a test-run can sample from, newest first within each dataset."""
    return (DatasetVersion.objects.filter(dataset__project=project, status=VersionStatus.READY)
            .select_related("dataset").order_by("dataset__name", "-number"))


def dataset_version_get(*, project: Project, pk) -> object | None:
    """The project's dataset version `pk`, or None when it does not exist here."""
    try:
        pk = int(pk)
    except (TypeError, ValueError):
        return None
    return DatasetVersion.objects.select_related("dataset").filter(dataset__project=project, pk=pk).first()


def reward_models(*, project: Project):
    return (ModelEntry.objects.filter(project=project, kind=ModelKind.REWARD_MODEL)
            .select_related("source_job", "created_by").order_by("name"))


def reward_templates() -> list[dict]:
    """Starter templates from training.reward_templates."""
    return list(list_templates())


def reward_template_get(name: str) -> dict | None:
    return next((t for t in reward_templates() if t["name"] == name), None)


def probe_panel(*, function: RewardFunction, version: RewardVersion | None, versions=()) -> dict:
    """What the reward page shows about probes: the shown version's status and verdicts, the rule,
    the author's probes; each of `versions` gets its status as `probe_state`."""
    from webapp.rewards import probes

    sha = probes.function_suite_sha(function)
    status = probes.probe_status(version, sha) if version is not None else None
    for v in versions:
        v.probe_state = status if version is not None and v.pk == version.pk else probes.probe_status(v, sha)
    return {"status": status, "run": status.run if status else None, "rule": probes.low_rule(function),
            "author_probes": probes.author_probes(function)}


def with_probe_states(functions) -> list[RewardFunction]:
    """`functions` as a list, each with `probe_state`: the probe status of its latest version (or None)."""
    from webapp.rewards import probes

    out = list(functions)
    for f in out:
        latest = f.latest_version
        f.probe_state = probes.probe_status(latest) if latest else None
    return out
