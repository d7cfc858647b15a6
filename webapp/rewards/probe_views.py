"""Thin views of a reward function's probes: the panel next to the code, add/remove probes, scale, override."""
from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from webapp.core.access import project_access
from webapp.core.models import Role
from webapp.core.services import ApplicationError
from webapp.rewards import probes, selectors
from webapp.rewards.forms import ProbeForm, ProbeOverrideForm, ProbeScaleForm


def probe_context(*, access, function, shown, versions=()) -> dict:
    """The panel's template context (also used by the reward page)."""
    panel = selectors.probe_panel(function=function, version=shown, versions=versions)
    slug = access.project.slug
    return {
        "probe": panel, "probe_form": ProbeForm(),
        "probe_override_form": ProbeOverrideForm(initial={"version": shown.number if shown else None}),
        "probe_scale_form": ProbeScaleForm(initial={"scale": function.probe_scale,
                                                    "threshold": function.probe_threshold}),
        "probes_api_url": (reverse("rewards-api:probes", kwargs={"slug": slug, "pk": function.pk,
                                                                 "number": shown.number}) if shown else ""),
        "probes_fragment_url": (reverse("rewards:probes", kwargs={"slug": slug, "pk": function.pk})
                                + f"?version={shown.number}" if shown else ""),
    }


def _back(function, version_number: int | None = None):
    url = reverse("rewards:detail", kwargs={"slug": function.project.slug, "pk": function.pk})
    latest = function.latest_version
    if version_number and latest and version_number != latest.number:
        url += f"?version={version_number}"
    return redirect(url + "#probes")


def _form_errors(request, form) -> None:
    for name, errors in form.errors.items():
        label = form.fields[name].label if name in form.fields else ""
        messages.error(request, f"{label}: {' '.join(errors)}" if label else " ".join(errors))


@require_GET
def probe_panel(request, slug, pk):
    """The probe panel alone (the page follows a pending run with it)."""
    access = project_access(request.user, slug)
    function = selectors.reward_function_get(project=access.project, pk=pk)
    number = request.GET.get("version", "")
    shown = (selectors.reward_version_get(function=function, number=int(number)) if number.isdigit()
             else function.latest_version)
    return render(request, "rewards/_probes.html", {
        "project": access.project, "access": access, "function": function, "shown": shown,
        **probe_context(access=access, function=function, shown=shown)})


@require_POST
def probe_add(request, slug, pk):
    access = project_access(request.user, slug, Role.ENGINEER)
    function = selectors.reward_function_get(project=access.project, pk=pk)
    form = ProbeForm(request.POST)
    if not form.is_valid():
        _form_errors(request, form)
        return _back(function)
    try:
        probe = probes.probe_create(function=function, user=request.user, **form.cleaned_data)
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Added the probe {probe.name}; the latest version's probes run again.")
    return _back(function)


@require_POST
def probe_remove(request, slug, pk, probe_id):
    access = project_access(request.user, slug, Role.ENGINEER)
    function = selectors.reward_function_get(project=access.project, pk=pk)
    probe = function.probes.filter(pk=probe_id).first()
    if probe is None:
        messages.error(request, "That probe does not exist (any more).")
    else:
        probes.probe_delete(probe=probe, user=request.user)
        messages.success(request, f"Removed the probe {probe.name}.")
    return _back(function)


@require_POST
def probe_scale(request, slug, pk):
    access = project_access(request.user, slug, Role.ENGINEER)
    function = selectors.reward_function_get(project=access.project, pk=pk)
    form = ProbeScaleForm(request.POST)
    if not form.is_valid():
        _form_errors(request, form)
        return _back(function)
    try:
        probes.probe_scale_set(function=function, user=request.user, **form.cleaned_data)
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"The built-in probes must now score {probes.low_rule(function).words}.")
    return _back(function)


@require_POST
def probe_run(request, slug, pk):
    """Run the probes of a version now, in the sandbox (a few calls with short limits)."""
    access = project_access(request.user, slug, Role.ENGINEER)
    function = selectors.reward_function_get(project=access.project, pk=pk)
    number = request.POST.get("version", "")
    version = selectors.reward_version_get(function=function, number=int(number)) if number.isdigit() else None
    if version is None:
        messages.error(request, "Choose a version.")
        return _back(function)
    run = probes.probe_run_now(version=version, user=request.user)
    (messages.success if run.state == "passed" else messages.warning)(
        request, f"Probes of v{version.number}: {probes.probe_status(version).words}.")
    return _back(function, version.number)


@require_POST
def probe_override(request, slug, pk):
    access = project_access(request.user, slug, Role.ENGINEER)
    function = selectors.reward_function_get(project=access.project, pk=pk)
    form = ProbeOverrideForm(request.POST)
    if not form.is_valid():
        _form_errors(request, form)
        return _back(function, request.POST.get("version", "").isdigit() and int(request.POST["version"]))
    version = selectors.reward_version_get(function=function, number=form.cleaned_data["version"])
    try:
        probes.probe_override(version=version, user=request.user, reason=form.cleaned_data["reason"])
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"v{version.number} may launch despite its failing probes; the override is "
                                  "recorded in the audit log.")
    return _back(function, version.number)
