"""Project and membership services (keyword-only, validated, audited)."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from webapp.core.audit import audit
from webapp.core.models import Invitation, Membership, Project, Role

INVITATION_VALID = timedelta(days=14)


class ApplicationError(Exception):
    """A user mistake with a message fit to show next to the form field it concerns."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field


def can_create_projects(user) -> bool:
    """PROJECT_CREATORS="staff" (the default): staff accounts only; "everyone": any signed-in user."""
    return bool(getattr(user, "is_authenticated", False)
                and (settings.PROJECT_CREATORS == "everyone" or user.is_staff))


@transaction.atomic
def project_create(*, user, name: str, slug: str = "", description: str = "") -> Project:
    if not can_create_projects(user):
        raise PermissionDenied("Only staff accounts can create projects here; ask an administrator.")
    name = name.strip()
    if not name:
        raise ApplicationError("A project needs a name.", field="name")
    slug = slugify(slug or name)[:64]
    if not slug:
        raise ApplicationError("Use letters or digits in the name or slug.", field="slug")
    if Project.objects.filter(slug=slug).exists():
        raise ApplicationError(f"A project with the slug '{slug}' already exists.", field="slug")
    project = Project.objects.create(name=name, slug=slug, description=description, created_by=user)
    Membership.objects.create(project=project, user=user, role=Role.ADMIN)
    audit(actor=user, action="project.create", project=project, obj=project, summary=f"Created project {name}")
    return project


@dataclass
class MemberOutcome:
    message: str
    membership: Membership | None = None  # a member's role was changed
    invitation: Invitation | None = None  # anyone else was invited


@transaction.atomic
def member_add(*, actor, project: Project, username: str, role: str) -> MemberOutcome:
    """Change a member's role, or invite a username (nobody joins without accepting).

    The answer for a username that is not a member is the same whether or not such an account exists."""
    username = username.strip()
    if not username:
        raise ApplicationError("Enter a username.", field="username")
    if role not in Role.values:
        raise ApplicationError(f"Unknown role '{role}'.", field="role")
    membership = Membership.objects.select_related("user").filter(project=project, user__username=username).first()
    if membership is not None:
        return MemberOutcome(f"{username} is now {role}.", membership=_member_role_set(actor, membership, role))
    invitation, _ = Invitation.objects.update_or_create(project=project, username=username,
                                                        defaults={"role": role, "invited_by": actor})
    audit(actor=actor, action="member.invite", project=project, obj=invitation,
          summary=f"Invited {username} as {role}", after={"username": username, "role": role})
    return MemberOutcome(f"{username} is invited as {role}: if that account exists, the invitation waits on its "
                         "home page until it is accepted.", invitation=invitation)


def _member_role_set(actor, membership: Membership, role: str) -> Membership:
    before = membership.role
    if before == Role.ADMIN and role != Role.ADMIN and _admin_count(membership.project) == 1:
        raise ApplicationError("A project must keep at least one admin.", field="role")
    membership.role = role
    membership.save(update_fields=["role", "updated_at"])
    audit(actor=actor, action="member.set", project=membership.project, obj=membership,
          summary=f"{membership.user.username}: {before} -> {role}", before={"role": before}, after={"role": role})
    return membership


def invitations_for(user):
    """The invitations waiting for this account."""
    return (Invitation.objects.filter(username=user.get_username(), updated_at__gte=timezone.now() - INVITATION_VALID)
            .select_related("project", "invited_by"))


@transaction.atomic
def invitation_answer(*, user, invitation_id: int, accept: bool) -> Membership | None:
    """Accept (join with the invited role) or decline an invitation addressed to `user`."""
    # of=("self",): PostgreSQL cannot lock the nullable side of the outer join to invited_by
    invitation = invitations_for(user).select_for_update(of=("self",)).filter(pk=invitation_id).first()
    if invitation is None:
        raise ApplicationError("This invitation is not open (any more).")
    project = invitation.project
    membership = None
    if accept:
        membership, created = Membership.objects.get_or_create(project=project, user=user,
                                                               defaults={"role": invitation.role})
        audit(actor=user, action="member.accept", project=project, obj=membership,
              summary=f"{user.get_username()} joined as {membership.role}", after={"role": membership.role})
    else:
        audit(actor=user, action="member.decline", project=project, obj=invitation,
              summary=f"{user.get_username()} declined the invitation")
    invitation.delete()
    return membership


@transaction.atomic
def invitation_revoke(*, actor, project: Project, invitation_id: int) -> None:
    invitation = Invitation.objects.filter(project=project, pk=invitation_id).first()
    if invitation is None:
        raise ApplicationError("This invitation is not open (any more).")
    audit(actor=actor, action="member.uninvite", project=project, obj=invitation,
          summary=f"Withdrew the invitation of {invitation.username}")
    invitation.delete()


@transaction.atomic
def member_remove(*, actor, project: Project, membership: Membership) -> None:
    if membership.role == Role.ADMIN and _admin_count(project) == 1:
        raise ApplicationError("A project must keep at least one admin.")
    audit(actor=actor, action="member.remove", project=project, obj=membership,
          summary=f"Removed {membership.user.username}", before={"role": membership.role})
    membership.delete()


@transaction.atomic
def project_update_settings(*, actor, project: Project, review_overlap: int, review_blind: bool) -> Project:
    if not 1 <= review_overlap <= 10:
        raise ApplicationError("Overlap must be between 1 and 10 reviewers per pair.", field="review_overlap")
    before = {"review_overlap": project.review_overlap, "review_blind": project.review_blind}
    project.review_overlap = review_overlap
    project.review_blind = review_blind
    project.save(update_fields=["review_overlap", "review_blind", "updated_at"])
    audit(actor=actor, action="project.settings", project=project, obj=project, before=before,
          after={"review_overlap": review_overlap, "review_blind": review_blind})
    return project


def _admin_count(project: Project) -> int:
    return Membership.objects.filter(project=project, role=Role.ADMIN).count()
