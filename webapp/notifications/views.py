"""The project's notifications page (admins): hooks, the delivery log, re-send."""
from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from webapp.core.access import project_access
from webapp.core.forms import apply_error
from webapp.core.models import Role
from webapp.core.services import ApplicationError
from webapp.notifications import services
from webapp.notifications.forms import HookForm
from webapp.notifications.models import Delivery, Hook


def hooks_page(request, slug):
    access = project_access(request.user, slug, Role.ADMIN)
    project = access.project
    form = HookForm(request.POST or None)
    added = None
    if request.method == "POST" and form.is_valid():
        try:
            added = services.hook_create(project=project, user=request.user, **form.cleaned_data)
        except ApplicationError as exc:
            apply_error(form, exc)
        else:
            # Answered here, not redirected: the signing secret is shown once in this page and nowhere else
            # (a message would carry it in a cookie until the next page read it).
            form = HookForm()
    hooks = [services.hook_json(h) for h in Hook.objects.filter(project=project)]
    page = Paginator(Delivery.objects.filter(hook__project=project).select_related("hook"), 50).get_page(
        request.GET.get("page"))
    return render(request, "notifications/hooks.html", {"project": project, "access": access, "form": form,
                                                        "hooks": hooks, "page": page, "added": added})


@require_POST
def hook_delete(request, slug, pk):
    access = project_access(request.user, slug, Role.ADMIN)
    hook = get_object_or_404(Hook, pk=pk, project=access.project)
    services.hook_delete(hook=hook, user=request.user)
    messages.success(request, f"Hook {hook.name} deleted.")
    return redirect("notifications", slug=slug)


@require_POST
def hook_test(request, slug, pk):
    access = project_access(request.user, slug, Role.ADMIN)
    hook = get_object_or_404(Hook, pk=pk, project=access.project)
    services.hook_test(hook=hook, user=request.user)
    messages.success(request, f"A test message to {hook.name} is on its way; see the log below.")
    return redirect("notifications", slug=slug)


@require_POST
def delivery_resend(request, slug, pk):
    access = project_access(request.user, slug, Role.ADMIN)
    d = get_object_or_404(Delivery, pk=pk, hook__project=access.project)
    services.delivery_resend(delivery=d, user=request.user)
    messages.success(request, f"{d.event} to {d.hook.name} re-sent.")
    return redirect("notifications", slug=slug)
