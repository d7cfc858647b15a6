"""The zero-signal section of a prompt set's Quality tab: start a dry run, follow it, read it, drop the tied prompts.

The section is added to the datasets app's Quality page (`quality_views.PAGE_SECTIONS`) by this app's
`AppConfig.ready`, so the datasets app never imports the runs app; its forms post to the views below.
"""
from __future__ import annotations

from django.contrib import messages
from django.http import JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from webapp.core.access import project_access
from webapp.core.models import Role
from webapp.core.services import ApplicationError
from webapp.core.text import count
from webapp.datasets.models import DatasetKind, DatasetVersion, VersionStatus
from webapp.registry.models import ModelEntry, ModelKind
from webapp.rewards.models import RewardVersion
from webapp.runs.models import Checkpoint, CheckpointStatus, ZeroSignalRun
from webapp.runs.services import prelaunch
from webapp.runs.services import zero_signal as zs

SECTION_KEY = "zero_signal"


def _quality_url(version, run=None) -> str:
    url = reverse("datasets-quality", args=[version.dataset.project.slug, version.dataset_id, version.number])
    return f"{url}?zs={run.pk}#q-{SECTION_KEY}" if run is not None else f"{url}#q-{SECTION_KEY}"


def _batch(raw) -> int:
    try:
        return max(1, min(int(raw), 1_000_000))
    except (TypeError, ValueError):
        return zs.default_batch()


def section_context(request, version, access) -> dict | None:
    """The section's context (None hides it: only verifiable prompt sets have zero-signal prompts)."""
    if version.dataset.kind != DatasetKind.PROMPTS:
        return None
    project = access.project
    runs = list(ZeroSignalRun.objects.filter(version=version).select_related(
        "model", "checkpoint", "reward_version__function", "derived")[:10])
    chosen = request.GET.get("zs")
    run = next((r for r in runs if str(r.pk) == chosen), runs[0] if runs else None)
    return {
        "models": ModelEntry.objects.filter(project=project, kind=ModelKind.CAUSAL_LM).exclude(path=""),
        "checkpoints": Checkpoint.objects.filter(job__project=project, status=CheckpointStatus.AVAILABLE)
                                         .select_related("job").order_by("-created_at")[:50],
        "rewards": RewardVersion.objects.filter(function__project=project).select_related("function")
                                        .order_by("function__name", "-number"),
        "limits": zs.LIMITS, "run": run, "payload": zs.run_payload(run, _batch(request.GET.get("batch")))
        if run else None, "others": [r for r in runs if r is not run],
        "start_url": reverse("runs:zero-signal-start", args=[project.slug, version.pk]),
    }


@require_POST
def zero_signal_start(request, slug, version_id):
    access = project_access(request.user, slug, Role.ENGINEER)
    version = _version(access.project, version_id)
    source = request.POST.get("source", "")
    kind, _, pk = source.partition(":")
    try:
        run = zs.dry_run_request(
            version=version, user=request.user, model_id=pk if kind == "model" else None,
            checkpoint_id=pk if kind == "checkpoint" else None, reward_version_id=request.POST.get("reward_version"),
            params={k: request.POST.get(k) for k in zs.PARAMS})
    except ApplicationError as exc:
        messages.error(request, exc.message)
        return redirect(_quality_url(version))
    messages.success(request, f"Zero-signal dry run {run.pk} queued.")
    return redirect(_quality_url(version, run))


def _version(project, version_id) -> DatasetVersion:
    return get_object_or_404(DatasetVersion.objects.select_related("dataset__project"), pk=version_id,
                             dataset__project=project, status=VersionStatus.READY)


def _run(project, run_id) -> ZeroSignalRun:
    return get_object_or_404(ZeroSignalRun.objects.select_related(
        "version__dataset__project", "model", "checkpoint", "reward_version__function", "derived"),
        pk=run_id, version__dataset__project=project)


def zero_signal_status(request, slug, run_id):
    access = project_access(request.user, slug)
    run = _run(access.project, run_id)
    return JsonResponse({"status": run.status, "progress": run.progress, "finished": run.finished,
                         "error": run.error})


def zero_signal_check(request, slug, run_id):
    """The launch review's zero-signal card, redrawn by the review page while the worker samples and scores."""
    access = project_access(request.user, slug)
    run = _run(access.project, run_id)
    return render(request, "runs/_prelaunch.html", {"project": access.project, "check": prelaunch.verdict(run)})


@require_POST
def zero_signal_derive(request, slug, run_id):
    access = project_access(request.user, slug, Role.ENGINEER)
    run = _run(access.project, run_id)
    try:
        new = zs.dry_run_derive(run=run, user=request.user)
    except ApplicationError as exc:
        messages.error(request, exc.message)
        return redirect(_quality_url(run.version, run))
    lin = new.lineage
    messages.success(request, f"Created v{new.number}: {count(lin['rows_kept'], 'prompt')} kept, "
                              f"{count(lin['rows_dropped'], 'zero-signal prompt')} dropped "
                              f"from v{run.version.number} (which is unchanged).")
    return redirect(reverse("datasets-version", args=[slug, new.dataset_id, new.number]))
