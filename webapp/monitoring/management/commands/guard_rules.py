"""`python manage.py guard_rules JOB [--set JSON] [--user NAME]`: show a run's health rules and their state,
or replace them (a JSON list such as '[{"rule": "kl", "threshold": 0.1, "action": "restore"}]')."""
from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from webapp.core.commands import command_engineer
from webapp.core.services import ApplicationError
from webapp.monitoring.services import job_rules_set, rules_status
from webapp.runs.models import Job


class Command(BaseCommand):
    help = "Show or set a run's health rules (built-in: kl, entropy_collapse, zero_variance_groups, ...)."

    def add_arguments(self, parser):
        parser.add_argument("job", type=int, help="run id")
        parser.add_argument("--set", default=None, metavar="JSON", help="replace the rules with this JSON list")
        parser.add_argument("--user", default="", help="username recorded as the actor (an engineer of the project)")

    def handle(self, *args, **opts):
        job = Job.objects.filter(pk=opts["job"]).select_related("project").first()
        if job is None:
            raise CommandError(f"There is no run #{opts['job']}.")
        if opts["set"] is not None:
            user = command_engineer(opts["user"], job.project)
            try:
                rules = json.loads(opts["set"])
            except json.JSONDecodeError as exc:
                raise CommandError(f"--set is not valid JSON: {exc}") from None
            try:
                job_rules_set(job=job, user=user, rules=rules)
            except ApplicationError as exc:
                raise CommandError(exc.message) from None
        rows = rules_status(job)
        if not rows:
            self.stdout.write(f"Run #{job.pk} has no health rules.")
        for r in rows:
            self.stdout.write(f"{r['name']:<26} {r['status']:<11} trips {r['trips']:<3} {r['summary']}")
