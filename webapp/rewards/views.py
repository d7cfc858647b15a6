"""Thin views for reward functions: list, create, editor (save), diff, test-runs, reward models."""
from __future__ import annotations

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from webapp.core.access import project_access
from webapp.core.forms import apply_error
from webapp.core.models import Role
from webapp.core.services import ApplicationError
from webapp.rewards import scoring, selectors, services
from webapp.rewards.analysis import diff_lines, diff_stats
from webapp.rewards.forms import RewardFunctionForm, RewardTestRunForm, RewardVersionForm
from webapp.rewards.probe_views import probe_context
from webapp.rewards.sandbox_status import isolation_summary


@require_GET
def reward_list(request, slug):
    access = project_access(request.user, slug)
    return render(request, "rewards/list.html", {
        "project": access.project, "access": access,
        "functions": selectors.with_probe_states(selectors.reward_function_list(project=access.project)),
        "reward_model_count": selectors.reward_models(project=access.project).count(),
    })


@require_http_methods(["GET", "POST"])
def reward_create(request, slug):
    access = project_access(request.user, slug, Role.ENGINEER)
    templates = selectors.reward_templates()
    chosen = selectors.reward_template_get(request.GET.get("template", "")) or (templates[0] if templates else None)
    initial = {"entry_point": "compute_score", "message": "Created"}
    if chosen:
        initial.update(source=chosen["source"], name=chosen["name"].replace("_", "-"),
                       description=chosen.get("description", ""))
    form = RewardFunctionForm(request.POST or None, initial=initial)
    error_line = None
    if request.method == "POST" and form.is_valid():
        try:
            function = services.reward_function_create(project=access.project, user=request.user,
                                                       **form.cleaned_data)
        except ApplicationError as exc:
            apply_error(form, exc)
            error_line = getattr(exc, "lineno", None)
        else:
            messages.success(request, f"Created {function.name} (version 1). Test-run it on a dataset below.")
            return redirect("rewards:detail", slug=slug, pk=function.pk)
    return render(request, "rewards/create.html", {
        "project": access.project, "access": access, "form": form, "templates": templates,
        "chosen_template": chosen, "error_lines": [error_line] if error_line else [],
        "isolation": isolation_summary(),
    })


@require_http_methods(["GET", "POST"])
def reward_detail(request, slug, pk):
    """The editor: a version's source, its history, save (engineers) and the test-run panel."""
    access = project_access(request.user, slug, Role.ENGINEER if request.method == "POST" else Role.VIEWER)
    function = selectors.reward_function_get(project=access.project, pk=pk)
    versions = list(selectors.reward_versions(function=function))
    shown = versions[0] if versions else None
    if request.GET.get("version"):
        shown = next((v for v in versions if str(v.number) == request.GET["version"]), None)
        if shown is None:
            raise Http404("No such version")
    run = None
    if request.GET.get("run", "").isdigit():
        run = selectors.reward_test_run_get(project=access.project, pk=int(request.GET["run"]))
        if run.function_id != function.pk:
            raise Http404("No such test-run")
    initial = {"source": shown.source if shown else "", "entry_point": shown.entry_point if shown else "compute_score"}
    form = RewardVersionForm(request.POST or None, initial=initial)
    error_lines: list[int] = []
    if request.method == "POST" and form.is_valid():
        try:
            outcome = services.reward_version_save(function=function, user=request.user, **form.cleaned_data)
        except ApplicationError as exc:
            apply_error(form, exc)
            error_lines = [exc.lineno] if getattr(exc, "lineno", None) else []
        else:
            (messages.success if outcome.created else messages.info)(request, outcome.message)
            for w in outcome.warnings:
                messages.warning(request, f"Line {w['lineno']}: {w['message']}" if w["lineno"] else w["message"])
            return redirect("rewards:detail", slug=slug, pk=function.pk)
    elif run is not None:
        error_lines = run.error_lines
    test_form = RewardTestRunForm(project=access.project, initial={"limit": 20})
    return render(request, "rewards/detail.html", {
        "project": access.project, "access": access, "function": function, "versions": versions,
        "shown": shown, "is_latest": bool(shown and versions and shown.pk == versions[0].pk), "form": form,
        "test_form": test_form, "run": run, "error_lines": error_lines,
        "test_source": request.GET.get("source") if request.GET.get("source") in ("rollouts", "model") else "",
        "test_runs": selectors.reward_test_runs(function=function, limit=10),
        "isolation": isolation_summary(), "templates": selectors.reward_templates(),
        "api_test_run_url": reverse("rewards-api:test-run", kwargs={"slug": slug, "pk": function.pk}),
        "api_check_url": reverse("rewards-api:check", kwargs={"slug": slug}),
        **probe_context(access=access, function=function, shown=shown, versions=versions),
    })


@require_GET
def reward_diff(request, slug, pk):
    access = project_access(request.user, slug)
    function = selectors.reward_function_get(project=access.project, pk=pk)
    versions = list(selectors.reward_versions(function=function))
    by_number = {v.number: v for v in versions}

    def pick(key: str, default):
        value = request.GET.get(key, "")
        if not value:
            return default
        if not value.isdigit() or int(value) not in by_number:
            raise Http404("No such version")
        return by_number[int(value)]

    new = pick("b", versions[0] if versions else None)
    old = pick("a", versions[1] if len(versions) > 1 else new)
    lines = diff_lines(old.source, new.source) if old and new else []
    return render(request, "rewards/diff.html", {
        "project": access.project, "access": access, "function": function, "versions": versions,
        "old": old, "new": new, "lines": lines, "stats": diff_stats(lines),
    })


@require_POST
def reward_test_run(request, slug, pk):
    """The no-JavaScript path of the test-run panel: run, store, show the stored run."""
    access = project_access(request.user, slug, Role.ENGINEER)
    function = selectors.reward_function_get(project=access.project, pk=pk)
    form = RewardTestRunForm(request.POST, project=access.project)
    if form.is_valid():
        data = form.cleaned_data
        try:
            version = (selectors.reward_version_get(function=function, number=data["version"])
                       if data.get("version") else None)
            run = scoring.reward_test_run_create(
                function=function, user=request.user, version=version, source=data["source"] or None,
                entry_point=data["entry_point"] or None, split=data["split"] or "", limit=data["limit"] or 20,
                dataset_version=selectors.dataset_version_get(project=access.project, pk=data["dataset_version"]),
                responses_text=data["responses"] or "", rollout_job_id=data.get("rollout_run"),
                rollout_step=data.get("rollout_step"), sample_model_id=data.get("sample_model"))
        except ApplicationError as exc:
            messages.error(request, exc.message)
        else:
            return redirect("rewards:test-run", slug=slug, pk=run.pk)
    else:
        for field, errors in form.errors.items():
            messages.error(request, f"{form.fields[field].label or field}: {' '.join(errors)}"
                           if field in form.fields else " ".join(errors))
    return redirect("rewards:detail", slug=slug, pk=function.pk)


@require_GET
def test_run_detail(request, slug, pk):
    access = project_access(request.user, slug)
    run = selectors.reward_test_run_get(project=access.project, pk=pk)
    template = "rewards/_test_run_results.html" if request.GET.get("fragment") else "rewards/test_run.html"
    return render(request, template, {"project": access.project, "access": access, "run": run,
                                      "function": run.function})


@require_GET
def reward_models(request, slug):
    access = project_access(request.user, slug)
    return render(request, "rewards/models.html", {
        "project": access.project, "access": access, "models": selectors.reward_models(project=access.project),
    })
