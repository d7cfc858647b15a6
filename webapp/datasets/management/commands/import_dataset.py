"""`python manage.py import_dataset FILE --project SLUG --name NAME [--map prompt=question,...] [--skip-bad-rows]`."""
from __future__ import annotations

import sys

from django.core.management.base import BaseCommand, CommandError

from webapp.core.commands import command_engineer
from webapp.core.models import Project
from webapp.core.services import ApplicationError
from webapp.core.text import count
from webapp.datasets.services import ImportFailed, dataset_import
from webapp.datasets.shapes import parse_column_map


class Command(BaseCommand):
    help = "Import a dataset file (JSON Lines, JSON array, CSV or Parquet) as a new dataset version."

    def add_arguments(self, parser):
        parser.add_argument("file")
        parser.add_argument("--project", required=True, help="project slug")
        parser.add_argument("--name", required=True, help="dataset name (an existing one gets a new version)")
        parser.add_argument("--map", default="", dest="column_map",
                            help="column mapping, e.g. prompt=question,ground_truth=answer")
        parser.add_argument("--skip-bad-rows", action="store_true",
                            help="import the valid rows and report the others (default: all or nothing)")
        parser.add_argument("--split", default="10%", help="validation split: a share (10%%) or a count (200)")
        parser.add_argument("--split-seed", type=int, default=0)
        parser.add_argument("--kind", choices=["preference", "prompts"], default=None)
        parser.add_argument("--user", default="", help="username recorded as the importer")

    def handle(self, *args, **opts):
        project = Project.objects.filter(slug=opts["project"]).first()
        if project is None:
            raise CommandError(f"There is no project '{opts['project']}'.")
        user = command_engineer(opts["user"], project)
        try:
            column_map = parse_column_map(opts["column_map"])
        except ValueError as exc:
            raise CommandError(f"--map: {exc}") from None
        last = {"pct": -10}

        def progress(fraction: float, phase: str) -> None:
            pct = int(fraction * 100)
            if pct >= last["pct"] + 10 and sys.stderr.isatty():
                last["pct"] = pct
                self.stderr.write(f"  {phase} {pct}%")

        try:
            version = dataset_import(project=project, user=user, name=opts["name"], path=opts["file"],
                                     kind=opts["kind"], column_map=column_map, skip_bad_rows=opts["skip_bad_rows"],
                                     split=opts["split"], split_seed=opts["split_seed"], progress=progress)
        except ImportFailed as exc:
            report = exc.record.report or {}
            for err in report.get("errors", [])[:20]:
                where = f"line {err['line']}" if err.get("line") else f"row {err['row']}"
                self.stderr.write(f"  {where}: {err['reason']}")
            if report.get("bad_rows", 0) > 20:
                self.stderr.write(f"  … {report['bad_rows'] - 20} more; full list: {exc.record.errors_path}")
            raise CommandError(exc.message) from None
        except ApplicationError as exc:
            raise CommandError(exc.message) from None
        report = version.report
        self.stdout.write(self.style.SUCCESS(
            f"Imported {count(version.row_count, 'row')} into {version} "
            f"({version.train_count} train, {version.val_count} val; "
            f"{report.get('shape')}, {report.get('format')}); content hash {version.content_hash[:12]}"))
        if report.get("skipped"):
            self.stdout.write(f"  skipped {count(report['skipped'], 'bad row')} (first: line "
                              f"{report['errors'][0].get('line') or report['errors'][0]['row']}: "
                              f"{report['errors'][0]['reason']})")
        if report.get("duplicates", {}).get("rows"):
            self.stdout.write(f"  {count(report['duplicates']['rows'], 'exact duplicate row')}")
