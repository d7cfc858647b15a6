"""Object-level access rules: every view and API endpoint goes through these.

A user outside a project gets 404 for anything in it (its existence is not revealed);
a member whose role is too low gets 403.
"""
from __future__ import annotations

from dataclasses import dataclass

from django.core.exceptions import PermissionDenied
from django.db.models import OuterRef, Subquery
from django.http import Http404

from webapp.core.models import ROLE_RANK, Membership, Project, Role


@dataclass(frozen=True)
class ProjectAccess:
    project: Project
    role: Role

    def can(self, role: str) -> bool:
        return ROLE_RANK[self.role] >= ROLE_RANK[Role(role)]

    @property
    def can_review(self) -> bool:
        return self.can(Role.REVIEWER)

    @property
    def can_engineer(self) -> bool:
        return self.can(Role.ENGINEER)

    @property
    def is_admin(self) -> bool:
        return self.can(Role.ADMIN)


def user_role(user, project: Project) -> Role | None:
    if not user.is_authenticated:
        return None
    if user.is_superuser:
        return Role.ADMIN
    role = Membership.objects.filter(project=project, user=user).values_list("role", flat=True).first()
    return Role(role) if role else None


def member_role_of(user, project_ref: str = "pk") -> dict:
    """An annotation that reads the user's role with a query's project (`project_ref`: the project's id in it),
    for `access_of`: the membership then costs no query of its own. Empty for superusers and anonymous users."""
    if not user.is_authenticated or user.is_superuser:
        return {}
    return {"member_role": Subquery(Membership.objects.filter(project=OuterRef(project_ref), user=user.pk)
                                    .order_by().values("role")[:1])}


def project_access(user, slug: str, min_role: str = Role.VIEWER) -> ProjectAccess:
    """Return the user's access to project `slug`, or raise 404 (not a member) / 403 (role too low)."""
    # The membership comes with the project: one query on every request instead of two.
    project = Project.objects.filter(slug=slug).annotate(**member_role_of(user)).first()
    if project is None:
        raise Http404("No such project")
    return access_of(user, project, getattr(project, "member_role", None), min_role)


def access_of(user, project: Project, member_role: str | None, min_role: str = Role.VIEWER) -> ProjectAccess:
    """The user's access to a project read with `member_role_of` (404 when not a member, 403 when the role is
    too low): the rule project_access applies, for a read that brings the project with something else."""
    if user.is_authenticated and not user.is_superuser:
        role = Role(member_role) if member_role else None
    else:
        role = user_role(user, project)
    if role is None:
        raise Http404("No such project")
    access = ProjectAccess(project=project, role=role)
    if not access.can(min_role):
        raise PermissionDenied(f"This needs the {Role(min_role).label.lower()} role in {project.name}.")
    return access


def visible_projects(user):
    if user.is_superuser:
        return Project.objects.all()
    return Project.objects.filter(memberships__user=user).distinct()
