"""`python manage.py attach_run PATH --project SLUG [--name N] [--model M --dataset D[:V] --reward R[:V]]
[--preset P] [--user U]`: follow a VERL (or TRL) run the app did not launch, read-only; `--stop JOB` ends it."""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from webapp.core.commands import command_engineer
from webapp.core.models import Project
from webapp.core.services import ApplicationError
from webapp.datasets.models import DatasetVersion
from webapp.registry.models import ModelEntry
from webapp.rewards.models import RewardVersion
from webapp.runs.models import Job
from webapp.runs.services import attach


def _versioned(value: str) -> tuple[str, int | None]:
    name, _, number = value.rpartition(":") if ":" in value else (value, "", "")
    return name, int(number) if number.isdigit() else None


class Command(BaseCommand):
    help = "Attach a VERL or TRL run folder as a read-only run that the app follows (curves, samples, checkpoints)."

    def add_arguments(self, parser):
        parser.add_argument("path", nargs="?", default="", help="the run's folder (under ATTACH_ROOTS/<project>/)")
        parser.add_argument("--project", default="", help="project slug")
        parser.add_argument("--name", default="")
        parser.add_argument("--model", default="", help="registered base model, for rollbacks")
        parser.add_argument("--dataset", default="", help="prompt dataset NAME[:VERSION], for rollbacks")
        parser.add_argument("--reward", default="", help="reward function NAME[:VERSION], for rollbacks")
        parser.add_argument("--preset", default="", help="settings of a rollback child (default: the demo preset)")
        parser.add_argument("--stop", type=int, default=0, metavar="JOB", help="stop following this attached run")
        parser.add_argument("--user", default="", help="username recorded as the actor (an engineer of the project)")

    def handle(self, *args, **opts):
        try:
            if opts["stop"]:
                job = Job.objects.filter(pk=opts["stop"]).select_related("project").first()
                if job is None:
                    raise CommandError(f"There is no run #{opts['stop']}.")
                attach.stop_following(job=job, user=command_engineer(opts["user"], job.project))
                self.stdout.write(self.style.SUCCESS(f"Run #{job.pk} is no longer followed."))
                return
            project = Project.objects.filter(slug=opts["project"]).first()
            if project is None or not opts["path"]:
                raise CommandError("Give the run's folder and --project SLUG.")
            job = attach.attach_run(project=project, user=command_engineer(opts["user"], project), path=opts["path"],
                                    name=opts["name"], preset=opts["preset"], **self._rollback(project, opts))
        except ApplicationError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(f"found: {'; '.join(job.attached['layout']['found'])}")
        self.stdout.write(self.style.SUCCESS(
            f"Run #{job.pk} follows {job.attached_dir} (read-only): step {job.last_step}, "
            f"{job.checkpoints.count()} checkpoint(s)."))

    def _rollback(self, project, opts) -> dict:
        out = {}
        if opts["model"]:
            out["base_model"] = ModelEntry.objects.filter(project=project, name=opts["model"]).first()
            if out["base_model"] is None:
                raise CommandError(f"No model {opts['model']!r} in {project.slug}.")
        if opts["dataset"]:
            name, number = _versioned(opts["dataset"])
            versions = DatasetVersion.objects.filter(dataset__project=project, dataset__name=name).order_by("-number")
            out["dataset_version"] = versions.filter(number=number).first() if number else versions.first()
            if out["dataset_version"] is None:
                raise CommandError(f"No dataset version {opts['dataset']!r} in {project.slug}.")
        if opts["reward"]:
            name, number = _versioned(opts["reward"])
            versions = RewardVersion.objects.filter(function__project=project, function__name=name).order_by("-number")
            out["reward_version"] = versions.filter(number=number).first() if number else versions.first()
            if out["reward_version"] is None:
                raise CommandError(f"No reward version {opts['reward']!r} in {project.slug}.")
        return out
