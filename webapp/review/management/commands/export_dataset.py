"""`python manage.py export_dataset DATASET --format verl|trl|jsonl --out PATH [--version N] [--approved-only]`.

It lives in the review app because `--approved-only` asks review which pairs were approved.
"""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.http import Http404

from webapp.core.models import Project
from webapp.core.services import ApplicationError
from webapp.datasets import selectors
from webapp.datasets.exporters import FORMATS, TRL_STYLES, export_version
from webapp.datasets.models import Dataset
from webapp.review.exports import export_approved


class Command(BaseCommand):
    help = "Export a dataset version as VERL parquet, TRL preference JSONL or plain JSONL."

    def add_base_argument(self, parser, *args, **kwargs):
        if "--version" not in args:  # ours selects a dataset version, not Django's version
            super().add_base_argument(parser, *args, **kwargs)

    def add_arguments(self, parser):
        parser.add_argument("dataset", help="dataset name or id")
        parser.add_argument("--format", required=True, choices=list(FORMATS))
        parser.add_argument("--out", required=True)
        parser.add_argument("--project", default="", help="project slug (needed when the name is in several)")
        parser.add_argument("--version", type=int, default=None, help="version number (default: the latest)")
        parser.add_argument("--approved-only", action="store_true", help="only the pairs approved in review")
        parser.add_argument("--trl-style", choices=list(TRL_STYLES), default="auto")

    def handle(self, *args, **opts):
        ref = opts["dataset"]
        if opts["project"]:
            project = Project.objects.filter(slug=opts["project"]).first()
            if project is None:
                raise CommandError(f"There is no project '{opts['project']}'.")
        else:
            matches = Dataset.objects.filter(pk=int(ref)) if ref.isdigit() else Dataset.objects.filter(name=ref)
            projects = sorted({d.project.slug for d in matches.select_related("project")})
            if not projects:
                raise CommandError(f"There is no dataset '{ref}'.")
            if len(projects) > 1:
                raise CommandError(f"'{ref}' exists in several projects ({', '.join(projects)}): pass --project.")
            project = Project.objects.get(slug=projects[0])
        try:
            version = selectors.version_get(project=project, dataset_id=ref, number=opts["version"])
        except Http404:
            what = f"version {opts['version']} of " if opts["version"] else "a ready version of "
            raise CommandError(f"There is no {what}dataset '{ref}' in {project.slug}.") from None
        try:
            export = export_approved if opts["approved_only"] else export_version
            result = export(version=version, fmt=opts["format"], out_path=opts["out"], trl_style=opts["trl_style"])
        except ApplicationError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(self.style.SUCCESS(f"Wrote {result.rows} rows of {version} to {result.path} "
                                             f"({FORMATS[result.format]})"))
