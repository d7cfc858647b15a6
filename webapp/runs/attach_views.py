"""Attach a run the app did not launch (a VERL or TRL output folder), and stop following one."""
from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from training.presets import preset_choices
from webapp.core.access import project_access
from webapp.core.models import Role
from webapp.core.services import ApplicationError
from webapp.datasets.models import DatasetKind, DatasetVersion, VersionStatus
from webapp.registry.models import ModelEntry, ModelKind
from webapp.rewards.models import RewardVersion
from webapp.runs import selectors
from webapp.runs.services import attach


class AttachForm(forms.Form):
    path = forms.CharField(max_length=500, label="Run folder", help_text="The folder VERL (or TRL) writes to: its "
                           "file-logger JSONL, checkpoints and rollout dumps, or TRL's output_dir.")
    name = forms.CharField(max_length=200, required=False, label="Name")
    base_model = forms.ModelChoiceField(ModelEntry.objects.none(), required=False, label="Base model")
    dataset_version = forms.ModelChoiceField(DatasetVersion.objects.none(), required=False, label="Prompt data")
    reward_version = forms.ModelChoiceField(RewardVersion.objects.none(), required=False, label="Reward")
    preset = forms.ChoiceField(choices=(), required=False, label="Settings of a rollback child")

    def __init__(self, *args, project, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["base_model"].queryset = ModelEntry.objects.filter(project=project, kind=ModelKind.CAUSAL_LM)
        self.fields["dataset_version"].queryset = DatasetVersion.objects.filter(
            dataset__project=project, dataset__kind=DatasetKind.PROMPTS, status=VersionStatus.READY
        ).select_related("dataset")
        self.fields["reward_version"].queryset = RewardVersion.objects.filter(
            function__project=project).select_related("function")
        self.fields["preset"].choices = [("", "the demo preset"), *preset_choices()]


def attach_new(request, slug):
    access = project_access(request.user, slug, Role.ENGINEER)
    form = AttachForm(request.POST or None, project=access.project)
    if request.method == "POST" and form.is_valid():
        try:
            job = attach.attach_run(project=access.project, user=request.user, **form.cleaned_data)
        except ApplicationError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            messages.success(request, f"Attached: run #{job.pk} follows {job.attached_dir} (read-only).")
            return redirect("runs:detail", slug=slug, pk=job.pk)
    roots = [f"{r}/{access.project.slug}/" for r in getattr(settings, "ATTACH_ROOTS", [])]
    return render(request, "runs/attach.html", {"project": access.project, "access": access, "form": form,
                                                "roots": roots})


@require_POST
def attach_stop(request, slug, pk):
    access = project_access(request.user, slug, Role.ENGINEER)
    job = selectors.job_get(project=access.project, pk=pk)
    if job is None:
        raise Http404("No such run.")
    try:
        attach.stop_following(job=job, user=request.user)
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Run #{job.pk} is no longer followed; what it gathered stays.")
    return redirect("runs:detail", slug=slug, pk=job.pk)
