"""Project and membership services (keyword-only, validated, audited)."""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils.text import slugify

from webapp.core.audit import audit
from webapp.core.models import Membership, Project, Role


class ApplicationError(Exception):
    """A user mistake with a message fit to show next to the form field it concerns."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field


@transaction.atomic
def project_create(*, user, name: str, slug: str = "", description: str = "") -> Project:
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


@transaction.atomic
def member_set(*, actor, project: Project, username: str, role: str) -> Membership:
    User = get_user_model()
    user = User.objects.filter(username=username.strip()).first()
    if user is None:
        raise ApplicationError(f"There is no user '{username}'.", field="username")
    if role not in Role.values:
        raise ApplicationError(f"Unknown role '{role}'.", field="role")
    membership = Membership.objects.filter(project=project, user=user).first()
    before = membership.role if membership else None
    if membership is None:
        membership = Membership.objects.create(project=project, user=user, role=role)
    else:
        if before == Role.ADMIN and role != Role.ADMIN and _admin_count(project) == 1:
            raise ApplicationError("A project must keep at least one admin.", field="role")
        membership.role = role
        membership.save(update_fields=["role", "updated_at"])
    audit(actor=actor, action="member.set", project=project, obj=membership,
          summary=f"{username}: {before or 'none'} -> {role}", before={"role": before}, after={"role": role})
    return membership


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
