"""The user a management command acts as is checked like a request: it exists and holds the role."""
from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from webapp.core.commands import command_engineer, command_user
from webapp.core.models import Role

pytestmark = pytest.mark.django_db


def test_no_user_means_no_actor(project):
    assert command_user("", project) is None and command_engineer(None, project) is None


def test_unknown_users_and_low_roles_are_refused(project, engineer, reviewer, admin_user, outsider):
    with pytest.raises(CommandError, match="There is no user 'ghost'"):
        command_engineer("ghost", project)
    with pytest.raises(CommandError, match=f"{reviewer.username} is not an engineer of project {project.slug}"):
        command_engineer(reviewer.username, project)
    with pytest.raises(CommandError, match="is not an engineer"):
        command_engineer(outsider.username, project)
    with pytest.raises(CommandError, match=f"{engineer.username} is not an admin of project"):
        command_user(engineer.username, project, Role.ADMIN)
    assert command_engineer(engineer.username, project) == engineer
    assert command_user(admin_user.username, project, Role.ADMIN) == admin_user


@pytest.mark.parametrize("argv", [
    ["launch_job", "--project", "{slug}", "--kind", "grpo", "--preset", "demo-cpu", "--dry-run", "--user", "{who}"],
    ["hooks", "{slug}", "list", "--user", "{who}"],
])
def test_commands_refuse_a_reviewer_acting_as_an_engineer_or_admin(project, reviewer, argv):
    args = [a.format(slug=project.slug, who=reviewer.username) for a in argv]
    with pytest.raises(CommandError, match="is not an? (engineer|admin) of project"):
        call_command(*args)
