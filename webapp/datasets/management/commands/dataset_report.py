"""`python manage.py dataset_report PROJECT DATASET [--version N] [--eval NAME[:N] ...] [--json] [--recompute]`.

Prints a version's quality report: the stored one when it was computed with the same options, else it is
computed here, in this process (no worker needed), with its progress on stderr.
"""
from __future__ import annotations

import json
import sys

from django.core.management.base import BaseCommand, CommandError
from django.http import Http404

from webapp.core.commands import command_engineer
from webapp.core.models import Project
from webapp.core.services import ApplicationError
from webapp.core.text import count
from webapp.datasets import quality_service, selectors
from webapp.datasets.models import ReportStatus


def add_common(parser) -> None:
    parser.add_argument("project", help="project slug")
    parser.add_argument("dataset", help="dataset name or id")
    parser.add_argument("--version", type=int, default=None, help="version number (default: the latest)")
    parser.add_argument("--eval", action="append", default=[], metavar="DATASET[:N]",
                        help="an evaluation set to check contamination against (its latest version, or vN); "
                             "repeat for several")
    parser.add_argument("--ngram", type=int, default=None, help="contamination n-gram size in words (default 13)")
    parser.add_argument("--threshold", type=float, default=None, help="near-duplicate similarity (default 0.8)")
    parser.add_argument("--user", default="", help="username recorded (an engineer of the project)")


def resolve(opts) -> tuple[Project, object, list]:
    """The project, the version and the evaluation versions named on the command line."""
    project = Project.objects.filter(slug=opts["project"]).first()
    if project is None:
        raise CommandError(f"There is no project '{opts['project']}'.")
    try:
        version = selectors.version_get(project=project, dataset_id=opts["dataset"], number=opts["version"])
    except Http404:
        what = f"version {opts['version']} of " if opts["version"] else "a ready version of "
        raise CommandError(f"There is no {what}dataset '{opts['dataset']}' in {project.slug}.") from None
    evals = []
    for ref in opts["eval"]:
        name, _, num = ref.rpartition(":") if ":" in ref else (ref, "", "")
        try:
            evals.append(selectors.version_get(project=project, dataset_id=name,
                                               number=int(num.lstrip("v")) if num else None))
        except (Http404, ValueError):
            raise CommandError(f"There is no evaluation set '{ref}' in {project.slug}.") from None
    return project, version, evals


def report_for(opts, *, recompute: bool = False):
    project, version, evals = resolve(opts)
    user = command_engineer(opts["user"], project)

    def progress(fraction: float, phase: str) -> None:
        sys.stderr.write(f"\r{phase}… {fraction:.0%}   ")
        sys.stderr.flush()

    try:
        report = quality_service.report_compute_now(version=version, user=user, eval_versions=evals,
                                                    ngram=opts["ngram"], threshold=opts["threshold"],
                                                    recompute=recompute, progress=progress)
    except ApplicationError as exc:
        raise CommandError(exc.message) from None
    sys.stderr.write("\n")
    if report.status == ReportStatus.RUNNING:
        raise CommandError(f"Report {report.pk} is being computed by a worker right now; try again shortly.")
    if report.status != ReportStatus.READY:
        raise CommandError(f"Report {report.pk} failed: {report.error}")
    return report


class Command(BaseCommand):
    help = "Show (computing it if needed) the quality report of a dataset version."

    def add_base_argument(self, parser, *args, **kwargs):
        if "--version" not in args:  # ours selects a dataset version, not Django's version
            super().add_base_argument(parser, *args, **kwargs)

    def add_arguments(self, parser):
        add_common(parser)
        parser.add_argument("--json", action="store_true", help="print the report as JSON (as the API gives it)")
        parser.add_argument("--rows", action="store_true", help="with --json: every row index per cleaning category")
        parser.add_argument("--recompute", action="store_true", help="compute again even when stored")

    def handle(self, *args, **opts):
        report = report_for(opts, recompute=opts["recompute"])
        if opts["json"]:
            payload = quality_service.report_payload(report, rows=opts["rows"])
            self.stdout.write(json.dumps(payload, indent=2, default=str))
            return
        self.stdout.write(render_text(report))


def render_text(report) -> str:
    r, v = report.result, report.version
    s = r["sections"]
    out = [f"Quality report {report.pk} of {v.dataset.name} v{v.number} ({count(r['rows'], 'row')}, "
           f"computed in {report.seconds} s)", ""]
    tt = s["task_types"]
    out.append("Task types: " + ", ".join(f"{t['label']} {t['rows']:,} ({t['share']:.0%})" for t in tt["table"]))
    if tt["warning"]:
        out.append(f"  WARNING: {tt['warning']}")
    d = s["duplicates"]
    out.append(f"Near-duplicates: {count(d['near']['clusters'], 'cluster')}, {count(d['near']['rows'], 'row')} "
               f"beyond the first of each (similarity >= {d['near']['threshold']})")
    out.append(f"Exact duplicates: {count(d['exact']['groups'], 'group')}, {count(d['exact']['rows'], 'extra row')}")
    if "identical_pairs" in s:
        p = s["identical_pairs"]
        out.append(f"Pairs without a preference: {p['rows']:,} ({p['identical']} identical, "
                   f"{p['whitespace']} only whitespace apart)")
    c = s["contamination"]
    if c["eval_sets"]:
        sets = ", ".join(f"{e['dataset']} v{e['number']}" for e in c["eval_sets"])
        out.append(f"Contamination ({c['ngram']}-grams) against {sets}: {count(c['rows'], 'row')}"
                   + (": " + " ".join(f"#{x['index']}" for x in c["listed"][:20]) if c["listed"] else ""))
    else:
        out.append("Contamination: no evaluation set chosen (--eval DATASET)")
    if "length_bias" in s:
        out.append(f"Length bias: chosen longer in {s['length_bias']['chosen_longer']:.0%} of pairs")
    lang = s["languages"]
    out.append("Languages: " + ", ".join(f"{x['name']} {x['rows']:,}" for x in lang["table"][:8]))
    out.append("")
    out.append("Cleaning (manage.py dataset_clean ... --drop CATEGORY,...): "
               + ", ".join(f"{k} {x['rows']:,}" for k, x in r["cleaning"].items()))
    return "\n".join(out)
