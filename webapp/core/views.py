"""Thin views: parse, check access, call one service, render."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import get_user_model, login
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from training.sandbox import isolation_info
from webapp.core import services
from webapp.core.access import project_access, visible_projects
from webapp.core.errors import error_response
from webapp.core.forms import JoinForm, MemberForm, ProjectForm, ProjectSettingsForm, apply_error
from webapp.core.models import AuditLog, Membership, Role
from webapp.core.workers import live_worker_info


def healthz(request):
    """"ok", then which isolation reward code gets here and on each live worker (modes only: no login here)."""
    lines = ["ok", f"reward sandbox here: {isolation_info()['mode']}"]
    for w in live_worker_info():
        lines.append(f"reward sandbox on a worker of {','.join(w['queues']) or 'no queue'}: {w['sandbox']['mode']}")
    return HttpResponse("\n".join(lines) + "\n", content_type="text/plain")


def home(request):
    form = ProjectForm(request.POST or None)
    if request.method == "POST" and not services.can_create_projects(request.user):
        raise PermissionDenied("Only staff accounts can create projects here; ask an administrator.")
    if request.method == "POST" and form.is_valid():
        try:
            project = services.project_create(user=request.user, **form.cleaned_data)
        except services.ApplicationError as exc:
            apply_error(form, exc)
        else:
            messages.success(request, f"Project {project.name} created. Upload a dataset to start.")
            return redirect("project", slug=project.slug)
    projects = visible_projects(request.user).order_by("name")
    return render(request, "core/home.html", {"projects": projects, "form": form,
                                              "can_create": services.can_create_projects(request.user),
                                              "invitations": services.invitations_for(request.user)})


@require_POST
def invitation_answer(request, pk, answer):
    if answer not in ("accept", "decline"):
        raise Http404("No such answer")
    try:
        membership = services.invitation_answer(user=request.user, invitation_id=pk, accept=answer == "accept")
    except services.ApplicationError as exc:
        messages.error(request, exc.message)
        return redirect("home")
    if membership is None:
        messages.info(request, "Invitation declined.")
        return redirect("home")
    messages.success(request, f"You joined {membership.project.name} as {membership.role}.")
    return redirect("project", slug=membership.project.slug)


def members(request, slug):
    access = project_access(request.user, slug)
    form = MemberForm(request.POST or None)
    invited = None  # (invitation, its link, what to say): answered in this page, never redirected
    if request.method == "POST":
        project_access(request.user, slug, Role.ADMIN)
        if form.is_valid():
            try:
                outcome = services.member_add(actor=request.user, project=access.project, **form.cleaned_data)
            except services.ApplicationError as exc:
                apply_error(form, exc)
            else:
                if outcome.invitation is None:
                    messages.success(request, outcome.message)
                    return redirect("members", slug=slug)
                invited = (outcome.invitation, _join_url(request, outcome.join_token), outcome.message)
                form = MemberForm()
    return _members_page(request, access, form, invited)


def _join_url(request, token: str) -> str:
    return request.build_absolute_uri(reverse("join", args=[token]))


def _members_page(request, access, form, invited=None):
    memberships = access.project.memberships.select_related("user").order_by("user__username")
    invitations = access.project.invitations.select_related("invited_by") if access.is_admin else []
    return render(request, "core/members.html", {"project": access.project, "access": access,
                                                 "memberships": memberships, "form": form, "invited": invited,
                                                 "invitations": invitations, "roles": Role.choices})


@require_POST
def invitation_link(request, slug, pk):
    """A new link for an open invitation, shown once in the answer (the old link stops working)."""
    access = project_access(request.user, slug, Role.ADMIN)
    try:
        invitation, token = services.invitation_link_renew(actor=request.user, project=access.project,
                                                           invitation_id=pk)
    except services.ApplicationError as exc:
        messages.error(request, exc.message)
        return redirect("members", slug=slug)
    message = f"A new link for {invitation.username}; the one before it no longer works."
    return _members_page(request, access, MemberForm(), (invitation, _join_url(request, token), message))


def join(request, token):
    """Where an invitation's link lands: accept as the invited account, sign in as it, or create it."""
    invitation = services.invitation_by_token(token)
    if invitation is None:
        return error_response(request, 404, "This invitation link is not valid any more: it was used, withdrawn or "
                                            "replaced by a newer one, or it is older than 14 days. Ask the "
                                            "project's admin for a new one.")
    user = request.user
    account_exists = get_user_model().objects.filter(username=invitation.username).exists()
    form = None
    if not user.is_authenticated and not account_exists:
        form = JoinForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            try:
                new_user, membership = services.join_with_new_account(token=token, **form.cleaned_data)
            except services.ApplicationError as exc:
                apply_error(form, exc)
            else:
                login(request, new_user, backend="webapp.core.throttling.ThrottledModelBackend")
                messages.success(request, f"Welcome, {new_user.username}: you joined {membership.project.name} "
                                          f"as {membership.role}.")
                return redirect("project", slug=membership.project.slug)
    return render(request, "core/join.html", {"invitation": invitation, "form": form, "token": token,
                                              "account_exists": account_exists})


@require_POST
def invitation_revoke(request, slug, pk):
    access = project_access(request.user, slug, Role.ADMIN)
    try:
        services.invitation_revoke(actor=request.user, project=access.project, invitation_id=pk)
    except services.ApplicationError as exc:
        messages.error(request, exc.message)
    return redirect("members", slug=slug)


@require_POST
def member_remove(request, slug, pk):
    access = project_access(request.user, slug, Role.ADMIN)
    membership = get_object_or_404(Membership, pk=pk, project=access.project)
    try:
        services.member_remove(actor=request.user, project=access.project, membership=membership)
    except services.ApplicationError as exc:
        messages.error(request, exc.message)
    return redirect("members", slug=slug)


def project_settings(request, slug):
    access = project_access(request.user, slug, Role.ADMIN)
    project = access.project
    initial = {"review_overlap": project.review_overlap, "review_blind": project.review_blind}
    form = ProjectSettingsForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            services.project_update_settings(actor=request.user, project=project, **form.cleaned_data)
        except services.ApplicationError as exc:
            apply_error(form, exc)
        else:
            messages.success(request, "Settings saved.")
            return redirect("project-settings", slug=slug)
    return render(request, "core/settings.html", {"project": project, "access": access, "form": form})


def audit_log(request, slug):
    access = project_access(request.user, slug, Role.ENGINEER)
    entries = AuditLog.objects.filter(project=access.project).select_related("actor")
    action = request.GET.get("action", "").strip()
    if action:
        entries = entries.filter(action__startswith=action)
    page = Paginator(entries, 50).get_page(request.GET.get("page"))
    return render(request, "core/audit.html", {"project": access.project, "access": access, "page": page,
                                               "action": action})
