"""`python manage.py rescore_run JOB --reward NAME [--number N] [--steps 3,5-8] [--component NAME | --alone]
[--here] [--user NAME]`: score a run's stored rollout samples again with another reward version."""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from webapp.core.commands import command_engineer
from webapp.core.services import ApplicationError
from webapp.rewards.models import RewardVersion
from webapp.runs.models import Job
from webapp.runs.services import rescore as service


class Command(BaseCommand):
    help = "Re-score a run's stored rollout samples with another reward version (nothing is generated)."

    def add_arguments(self, parser):
        parser.add_argument("job", type=int, help="run id")
        parser.add_argument("--reward", required=True, help="reward function name (of the run's project)")
        parser.add_argument("--number", type=int, help="its version number (default: the latest)")
        parser.add_argument("--steps", default="", help="stored steps, e.g. 3,5-8 (default: all)")
        parser.add_argument("--component", default=None,
                            help="the job's component the version replaces (default: the one of the same function)")
        parser.add_argument("--alone", action="store_true", help="score the version alone, not in the job's mix")
        parser.add_argument("--here", action="store_true",
                            help="score in this process (still in the sandbox) and print the outcome, not on a worker")
        parser.add_argument("--user", default="", help="username recorded as the actor (an engineer of the project)")

    def handle(self, *args, **opts):
        job = Job.objects.filter(pk=opts["job"]).select_related("project").first()
        if job is None:
            raise CommandError(f"There is no run #{opts['job']}.")
        user = command_engineer(opts["user"], job.project)
        versions = RewardVersion.objects.filter(function__project=job.project, function__name=opts["reward"])
        version = (versions.filter(number=opts["number"]) if opts["number"] else versions).order_by("-number").first()
        if version is None:
            raise CommandError(f"Project {job.project.slug} has no reward {opts['reward']!r}"
                               + (f" v{opts['number']}" if opts["number"] else "") + ".")
        try:
            rescore = service.rescore_create(job=job, user=user, version=version,
                                             steps=service.parse_steps(opts["steps"]),
                                             component="" if opts["alone"] else opts["component"],
                                             queue=not opts["here"])
        except ApplicationError as exc:
            raise CommandError(exc.message) from None
        if not opts["here"]:
            self.stdout.write(self.style.SUCCESS(
                f"Re-score #{rescore.pk} queued: {rescore.sample_count} samples of run #{job.pk} with {version}."))
            return
        rescore = service.rescore_execute(rescore_id=rescore.pk)
        if rescore.error:
            raise CommandError(f"Re-score #{rescore.pk} failed: {rescore.error}")
        s = rescore.summary
        self.stdout.write(self.style.SUCCESS(
            f"Re-score #{rescore.pk}: {rescore.changed_count} of {rescore.done_count} samples changed "
            f"({rescore.changed_share or 0:.1%}); mean {_f(s.get('old_mean'))} -> {_f(s.get('new_mean'))}."))


def _f(value) -> str:
    return "n/a" if value is None else f"{value:.4f}"
