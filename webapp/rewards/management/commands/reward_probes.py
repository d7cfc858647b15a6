"""`python manage.py reward_probes --project SLUG NAME [--number N] [--run] [--override REASON --user NAME]`

Shows the probe verdicts of a stored reward version (the latest by default) as JSON; --run runs them
now in the sandbox; --override lets a version with failing probes launch (needs --user, an engineer
of the project; audited). Exit status 1 while the version's probes block a launch (failing or pending).
"""
from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from webapp.core.commands import command_engineer
from webapp.core.models import Project
from webapp.core.services import ApplicationError
from webapp.rewards import probes
from webapp.rewards.models import RewardFunction
from webapp.rewards.probe_api import status_body


class Command(BaseCommand):
    help = "Show, run or override the probes of a stored reward function version."

    def add_arguments(self, parser):
        parser.add_argument("name", help="the reward function's name")
        parser.add_argument("--project", required=True, help="project slug")
        parser.add_argument("--number", type=int, help="the version number (default: the latest)")
        parser.add_argument("--run", action="store_true", help="run the probes now, in the sandbox")
        parser.add_argument("--override", metavar="REASON", help="let the failing probes pass, with this reason")
        parser.add_argument("--user", default="", help="the engineer acting (needed by --run and --override)")
        parser.add_argument("--indent", type=int, default=2, help="JSON indent (0: one line)")

    def handle(self, *args, **opts):
        project = Project.objects.filter(slug=opts["project"]).first()
        if project is None:
            raise CommandError(f"No project with the slug '{opts['project']}'.")
        function = RewardFunction.objects.filter(project=project, name=opts["name"]).first()
        if function is None:
            raise CommandError(f"No reward function '{opts['name']}' in project {project.slug}.")
        version = (function.versions.filter(number=opts["number"]).first() if opts["number"]
                   else function.latest_version)
        if version is None:
            raise CommandError(f"{function.name} has no version {opts['version'] or ''}".strip() + ".")
        user = command_engineer(opts["user"], project)
        if (opts["run"] or opts["override"]) and user is None:
            raise CommandError("--run and --override act as an engineer: add --user NAME.")
        if opts["run"]:
            probes.probe_run_now(version=version, user=user)
        if opts["override"]:
            try:
                probes.probe_override(version=version, user=user, reason=opts["override"])
            except ApplicationError as exc:
                raise CommandError(exc.message) from None
        body = status_body(version)
        self.stdout.write(json.dumps(body, indent=opts["indent"] or None, default=str))
        if body["blocks_launch"]:
            raise CommandError(f"{function.name} v{version.number}: {body['words']}; it cannot launch.")
