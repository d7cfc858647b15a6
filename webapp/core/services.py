"""Project and membership services (keyword-only, validated, audited): projects, members, invitations and the
accounts people create from an invitation's link."""
from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
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
    join_token: str = ""  # the secret of the invitation's link, shown to the admin once


def can_see_accounts(user) -> bool:
    """Staff see which accounts exist (they manage them in the admin too); a project admin is not told."""
    return bool(getattr(user, "is_staff", False))


@transaction.atomic
def member_add(*, actor, project: Project, username: str, role: str) -> MemberOutcome:
    """Change a member's role, or invite a username (nobody joins without accepting) with a link to send them.

    The link lets the person sign in as that username, or create the account when there is none, and join. To a
    project admin the answer is the same whether or not such an account exists; staff are told which it is."""
    username = username.strip()
    if not username:
        raise ApplicationError("Enter a username.", field="username")
    if role not in Role.values:
        raise ApplicationError(f"Unknown role '{role}'.", field="role")
    membership = Membership.objects.select_related("user").filter(project=project, user__username=username).first()
    if membership is not None:
        return MemberOutcome(f"{username} is now {role}.", membership=_member_role_set(actor, membership, role))
    _check_account_name(username)
    invitation, _ = Invitation.objects.update_or_create(project=project, username=username,
                                                        defaults={"role": role, "invited_by": actor})
    token = _new_join_token(invitation)
    audit(actor=actor, action="member.invite", project=project, obj=invitation,
          summary=f"Invited {username} as {role}", after={"username": username, "role": role})
    message = (f"{username} is invited as {role}. Send them the link below: it lets them sign in as {username} — "
               "or create that account if there is none yet — and join.")
    if can_see_accounts(actor):
        exists = get_user_model().objects.filter(username=username).exists()
        message += (f" An account named {username} exists: it also finds the invitation on its home page."
                    if exists else f" There is no account named {username} yet: the link creates it.")
    return MemberOutcome(message, invitation=invitation, join_token=token)


def _check_account_name(username: str) -> None:
    """An invitation is for a name an account can have: one that can never exist is refused now."""
    field = get_user_model()._meta.get_field("username")
    try:
        field.run_validators(username)
    except ValidationError as exc:
        raise ApplicationError(f"'{username}' cannot be an account name: {' '.join(exc.messages)}",
                               field="username") from None


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _new_join_token(invitation: Invitation) -> str:
    """A fresh secret for the invitation's link; the one before it stops working."""
    token = secrets.token_urlsafe(24)
    invitation.token_hash = _token_hash(token)
    invitation.save(update_fields=["token_hash", "updated_at"])
    return token


@transaction.atomic
def invitation_link_renew(*, actor, project: Project, invitation_id: int) -> tuple[Invitation, str]:
    """A new link for an open invitation (the old link stops working; the 14 days start again)."""
    invitation = Invitation.objects.select_for_update().filter(project=project, pk=invitation_id).first()
    if invitation is None:
        raise ApplicationError("This invitation is not open (any more).")
    token = _new_join_token(invitation)
    audit(actor=actor, action="member.invite_link", project=project, obj=invitation,
          summary=f"New invitation link for {invitation.username}")
    return invitation, token


def invitation_by_token(token: str) -> Invitation | None:
    """The open invitation whose link holds `token`."""
    if not token:
        return None
    return (Invitation.objects.filter(token_hash=_token_hash(token),
                                      updated_at__gte=timezone.now() - INVITATION_VALID)
            .select_related("project", "invited_by").first())


@transaction.atomic
def join_with_new_account(*, token: str, password1: str, password2: str):
    """Create the invited account from the invitation's link and join the project with the invited role.

    Returns (user, membership). Only while no account of that name exists: one that does signs in instead."""
    User = get_user_model()
    found = invitation_by_token(token)
    invitation = Invitation.objects.select_for_update(of=("self",)).filter(pk=found.pk).first() if found else None
    if invitation is None:
        raise ApplicationError("This invitation link is not valid any more. Ask the project's admin for a new one.")
    username = invitation.username
    if User.objects.filter(username=username).exists():
        raise ApplicationError(f"An account named {username} exists already: sign in as {username} to join.")
    if password1 != password2:
        raise ApplicationError("The two passwords differ.", field="password2")
    try:
        validate_password(password1, user=User(username=username))
    except ValidationError as exc:
        raise ApplicationError(" ".join(exc.messages), field="password1") from None
    try:
        with transaction.atomic():
            user = User.objects.create_user(username=username, password=password1)
    except IntegrityError:  # created at this very moment by a second click
        raise ApplicationError(f"An account named {username} exists already: sign in as {username} to join.") \
            from None
    inviter = invitation.invited_by.username if invitation.invited_by else "an admin"
    audit(actor=user, action="account.create", project=invitation.project, obj=user,
          summary=f"{username} created their account from an invitation by {inviter}")
    return user, _accept(invitation, user)


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
    if accept:
        return _accept(invitation, user)
    audit(actor=user, action="member.decline", project=invitation.project, obj=invitation,
          summary=f"{user.get_username()} declined the invitation")
    invitation.delete()
    return None


def _accept(invitation: Invitation, user) -> Membership:
    project = invitation.project
    membership, _ = Membership.objects.get_or_create(project=project, user=user, defaults={"role": invitation.role})
    audit(actor=user, action="member.accept", project=project, obj=membership,
          summary=f"{user.get_username()} joined as {membership.role}", after={"role": membership.role})
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
