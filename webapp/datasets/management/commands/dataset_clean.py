"""`python manage.py dataset_clean PROJECT DATASET --drop near_duplicates,contaminated,... [--eval NAME[:N]]`.

Makes a new version without the rows of the chosen categories of the version's quality report (computed
here first if it is not stored for these options). The old version is kept; the new one's lineage and
the audit log record what was dropped and by which report.
"""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from webapp.core.commands import command_engineer
from webapp.core.services import ApplicationError
from webapp.datasets.cleaning import clean_version
from webapp.datasets.management.commands.dataset_report import add_common, report_for, resolve


class Command(BaseCommand):
    help = "Create a cleaned version of a dataset from its quality report."

    def add_base_argument(self, parser, *args, **kwargs):
        if "--version" not in args:
            super().add_base_argument(parser, *args, **kwargs)

    def add_arguments(self, parser):
        add_common(parser)
        parser.add_argument("--drop", required=True,
                            help="comma-separated: near_duplicates, exact_duplicates, contaminated, identical_pairs")

    def handle(self, *args, **opts):
        project, _, _ = resolve(opts)
        user = command_engineer(opts["user"], project)
        report = report_for(opts)
        try:
            new = clean_version(report=report, user=user, categories=opts["drop"].split(","))
        except ApplicationError as exc:
            raise CommandError(exc.message) from None
        lin = new.lineage
        self.stdout.write(self.style.SUCCESS(
            f"Created {new.dataset.name} v{new.number}: {lin['rows_kept']:,} rows kept, {lin['rows_dropped']:,} "
            f"dropped ({lin['summary']}) from v{lin['parent']['number']} by quality report {report.pk}"))
