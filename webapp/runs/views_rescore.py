"""Re-score pages: ask for a re-score of a run's stored samples, follow it, compare old and new scores."""
from __future__ import annotations

from django import forms
from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import redirect, render

from training import rollouts
from webapp.core.access import project_access
from webapp.core.forms import apply_error
from webapp.core.models import Role
from webapp.core.services import ApplicationError
from webapp.core.text import count
from webapp.core.workers import worker_online
from webapp.rewards.models import RewardVersion
from webapp.runs import selectors
from webapp.runs.services import rescore as service

AUTO = "__auto__"


class RescoreForm(forms.Form):
    version = forms.ModelChoiceField(queryset=RewardVersion.objects.none(), label="Reward version")
    component = forms.ChoiceField(label="In place of", required=False)
    steps = forms.CharField(label="Steps", required=False, help_text="Blank = every stored step; e.g. 3, 5-8.")

    def __init__(self, *args, project, reward: dict, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["version"].queryset = RewardVersion.objects.filter(
            function__project=project).select_related("function").order_by("function__name", "-number")
        self.fields["component"].choices = (
            [(AUTO, "the job's component from the same reward function (else alone)")]
            + [(c["name"], f"{c['name']} (weight {c['weight']:g})") for c in reward["components"]]
            + [("", "nothing: score it alone")])
        self.fields["component"].initial = AUTO


def _job(access, pk):
    job = selectors.job_get(project=access.project, pk=pk)
    if job is None:
        raise Http404("No such job")
    return job


def rescore_list(request, slug, pk):
    access = project_access(request.user, slug)
    job = _job(access, pk)
    reward = service.job_reward(job)
    form = RescoreForm(request.POST or None, project=access.project, reward=reward)
    if request.method == "POST":
        access = project_access(request.user, slug, Role.ENGINEER)
        if form.is_valid():
            component = form.cleaned_data["component"]
            try:
                rescore = service.rescore_create(
                    job=job, user=request.user, version=form.cleaned_data["version"],
                    steps=service.parse_steps(form.cleaned_data["steps"]),
                    component=None if component == AUTO else component)
            except ApplicationError as exc:
                apply_error(form, exc)
            else:
                messages.success(request, f"Re-score #{rescore.pk} queued: {count(rescore.sample_count, 'sample')}.")
                return redirect("runs:rescore", slug, job.pk, rescore.pk)
    stored = rollouts.steps(job.run_dir) if job.run_dir else []
    return render(request, "runs/rescore_list.html", {
        "project": access.project, "access": access, "job": job, "form": form, "stored": stored,
        "rescores": selectors.job_rescores(job), "reward": reward})


def rescore_detail(request, slug, pk, rid):
    access = project_access(request.user, slug)
    job = _job(access, pk)
    rescore = selectors.rescore_get(project=access.project, pk=rid)
    if rescore is None or rescore.job_id != job.pk:
        raise Http404("No such re-score")
    sort = request.GET.get("sort", "step")
    sort = sort if sort in selectors.RESCORE_SORTS else "step"
    show = request.GET.get("show", "all")
    show = show if show in selectors.RESCORE_SHOWS else "all"
    step_text = request.GET.get("step", "").strip()
    step = int(step_text) if step_text.lstrip("-").isdigit() else None
    text = request.GET.get("q", "").strip()[:200]
    page = Paginator(selectors.rescore_samples(rescore, sort=sort, show=show, step=step, text=text), 100).get_page(
        request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render(request, "runs/rescore_detail.html", {
        "project": access.project, "access": access, "job": job, "rescore": rescore, "page": page, "sort": sort,
        "show": show, "step": step, "q": text, "shows": selectors.RESCORE_SHOWS, "query": query.urlencode(),
        "worker_online": worker_online() if rescore.is_active else True,
        "sorts": [("step", "Step"), ("-delta", "Largest rise"), ("delta", "Largest fall"), ("-old", "Old score ↓"),
                  ("old", "Old score ↑"), ("-new", "New score ↓"), ("new", "New score ↑")]})
