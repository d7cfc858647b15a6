"""What management commands share: the user a command acts as, checked like a request would be."""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from webapp.core.access import user_role
from webapp.core.models import ROLE_RANK, Project, Role


def command_user(username: str | None, project: Project, at_least: str = Role.ENGINEER):
    """The account named by --user, which must hold `at_least` that role in `project`; None without --user."""
    if not username:
        return None
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise CommandError(f"There is no user '{username}'.")
    role = user_role(user, project)
    if role is None or ROLE_RANK[role] < ROLE_RANK[at_least]:
        raise CommandError(f"{user.username} is not {'an' if at_least in ('admin', 'engineer') else 'a'} "
                           f"{at_least} of project {project.slug}.")
    return user


def command_engineer(username: str | None, project: Project):
    """`command_user` for the commands that act as an engineer (most of them)."""
    return command_user(username, project, Role.ENGINEER)
