"""`python manage.py diagnostic_bundle JOB [--steps 5] [--out PATH] [--queue] [--user NAME]`: build a run's
diagnostic bundle (secrets scrubbed), here by default or on a worker with --queue, and print its file list."""
from __future__ import annotations

import shutil

from django.core.management.base import BaseCommand, CommandError

from webapp.core.commands import command_engineer
from webapp.core.services import ApplicationError
from webapp.monitoring.services import bundle as bundles
from webapp.runs.models import Job


class Command(BaseCommand):
    help = ("Zip a run's spec, configs, versions, logs, metrics, guard history, samples, reward code and data "
            "fingerprints (secrets scrubbed).")

    def add_arguments(self, parser):
        parser.add_argument("job", type=int, help="run id")
        parser.add_argument("--steps", type=int, default=5, help="rollout samples of the last N steps (default 5)")
        parser.add_argument("--out", default="", help="also copy the zip here")
        parser.add_argument("--queue", action="store_true", help="let a worker build it (prints the bundle id)")
        parser.add_argument("--user", default="", help="username recorded as the actor (an engineer of the project)")

    def handle(self, *args, **opts):
        job = Job.objects.filter(pk=opts["job"]).select_related("project").first()
        if job is None:
            raise CommandError(f"There is no run #{opts['job']}.")
        user = command_engineer(opts["user"], job.project)
        try:
            bundle = bundles.bundle_request(job=job, user=user, sample_steps=opts["steps"])
        except ApplicationError as exc:
            raise CommandError(exc.message) from None
        if opts["queue"]:
            self.stdout.write(f"Bundle {bundle.pk} of run #{job.pk} is {bundle.status} on a worker.")
            return
        bundle = bundles.bundle_run(bundle_id=bundle.pk)  # here, unless a worker has already claimed it
        path = bundles.bundle_file(bundle)
        if path is None:
            raise CommandError(bundle.error or f"Bundle {bundle.pk} is {bundle.status} (a worker is building it).")
        for f in bundle.files:
            self.stdout.write(f"{f['bytes']:>12}  {f['name']}")
        for f in bundle.left_out:
            self.stdout.write(f"{'cut':>12}  {f['name']}: {f['why']}")
        if opts["out"]:
            shutil.copyfile(path, opts["out"])
            path = opts["out"]
        self.stdout.write(self.style.SUCCESS(f"{path} ({bundle.size_bytes} bytes)"))
