"""`python manage.py rollback JOB --step N [--reason TEXT] [--set lr=5e-7] [--user NAME]`: start a child run
from a checkpoint, exactly as the Roll back button does."""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from webapp.core.commands import command_engineer
from webapp.core.services import ApplicationError
from webapp.monitoring.services import job_rollback
from webapp.runs.models import Job


class Command(BaseCommand):
    help = "Roll a run back to one of its checkpoints: a child run resumes from it (the run itself stays)."

    def add_arguments(self, parser):
        parser.add_argument("job", type=int, help="run id")
        parser.add_argument("--step", type=int, required=True, help="checkpoint step to resume from")
        parser.add_argument("--reason", default="", help="why (goes to the audit log)")
        parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", dest="sets",
                            help="change a hyperparameter of the child: lr or kl_coef (repeatable)")
        parser.add_argument("--stop-parent", action="store_true", help="also stop the run if it is still running")
        parser.add_argument("--user", default="", help="username recorded as the actor (an engineer of the project)")

    def handle(self, *args, **opts):
        job = Job.objects.filter(pk=opts["job"]).select_related("project").first()
        if job is None:
            raise CommandError(f"There is no run #{opts['job']}.")
        user = command_engineer(opts["user"], job.project)
        try:
            child = job_rollback(job=job, step=opts["step"], user=user, reason=opts["reason"],
                                 hp_overrides=opts["sets"], stop_parent=opts["stop_parent"])
        except ApplicationError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(self.style.SUCCESS(
            f"Run #{child.pk} resumes from step {opts['step']} of run #{job.pk}"
            f"{' with ' + ', '.join(opts['sets']) if opts['sets'] else ''}."))
