"""`python manage.py reward_check REWARD_FILE --dataset DATASET [--project SLUG] [--limit N] [--responses FILE]`
`python manage.py reward_check REWARD_FILE --project SLUG --rollouts JOB[@STEP] | --model NAME --dataset DATASET`
`python manage.py reward_check REWARD_FILE --probes [--probe-file PROBES.json] [--scale unit|signed|custom]`

Checks a reward file (syntax, signature), scores it in the sandbox on the first N rows of a dataset
version or on pasted responses, and prints the results as JSON. Nothing is stored. Exit status 1
when the file cannot be checked or loaded; scoring errors of single samples are in the JSON ("errors"
counts them), and "reference_check" is true when a prompt set without responses had each ground truth
scored against itself: --rollouts (a job's stored rollouts) or --model (a registered model's answers to
the dataset's prompts) score real responses instead.
With --probes it runs the probe suite instead (webapp.rewards.probes: the built-ins that must score
low, plus the probes of --probe-file, a JSON list of {name, solution_str, ground_truth, lo, hi, ...});
exit status 1 when a probe fails.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from webapp.core.models import Project
from webapp.core.services import ApplicationError
from webapp.datasets.models import DatasetVersion, VersionStatus
from webapp.rewards.scoring import reward_file_check
from webapp.rewards.services import SourceError


def resolve_dataset_version(spec: str, project_slug: str | None):
    """DATASET is NAME (latest ready version), NAME@N (version N) or a dataset version id."""
    qs = DatasetVersion.objects.select_related("dataset__project")
    if project_slug:
        if not Project.objects.filter(slug=project_slug).exists():
            raise CommandError(f"No project with the slug '{project_slug}'.")
        qs = qs.filter(dataset__project__slug=project_slug)
    name, _, number = spec.rpartition("@") if "@" in spec else (spec, "", "")
    by_name = qs.filter(dataset__name=name)
    if number:
        if not number.lstrip("v").isdigit():
            raise CommandError(f"'{spec}': the version after '@' must be a number, e.g. {name}@2.")
        by_name = by_name.filter(number=int(number.lstrip("v")))
    else:
        by_name = by_name.filter(status=VersionStatus.READY).order_by("-number")
    projects = {dv.dataset.project.slug for dv in by_name}
    if len(projects) > 1:
        raise CommandError(f"Datasets named '{name}' exist in several projects ({', '.join(sorted(projects))}); "
                           "add --project SLUG.")
    found = by_name.first()
    if found is None and spec.isdigit():
        found = qs.filter(pk=int(spec)).first()
    if found is None:
        raise CommandError(f"No dataset version '{spec}'" + (f" in project {project_slug}" if project_slug else "")
                           + ". Use NAME, NAME@VERSION or a dataset version id.")
    return found


class Command(BaseCommand):
    help = "Score a reward file in the sandbox on dataset rows or responses and print JSON results."

    def add_arguments(self, parser):
        parser.add_argument("reward_file", help="a Python file defining compute_score (VERL's contract)")
        parser.add_argument("--dataset", help="NAME, NAME@VERSION or a dataset version id")
        parser.add_argument("--project", help="project slug (needed when several projects have the dataset)")
        parser.add_argument("--limit", type=int, default=20, help="the first N rows (default 20)")
        parser.add_argument("--split", choices=["", "train", "val"], default="", help="rows of one split only")
        parser.add_argument("--responses", help="a file of responses (one per line, or JSON); '-' reads stdin")
        parser.add_argument("--name", default="compute_score", help="the function to call (default compute_score)")
        parser.add_argument("--indent", type=int, default=2, help="JSON indent (0: one line)")
        parser.add_argument("--rollouts", metavar="JOB[@STEP]", help="score the stored rollouts of a job of --project "
                                                                     "(the latest step, or STEP)")
        parser.add_argument("--model", help="score the answers this registered causal LM of --project gives to the "
                                            "prompts of --dataset")
        parser.add_argument("--probes", action="store_true", help="run the probe suite instead of a test-run")
        parser.add_argument("--probe-file", help="your probes: a JSON list of {name, solution_str, ground_truth, "
                                                 "data_source, extra_info, prompt, lo, hi}")
        parser.add_argument("--scale", choices=["unit", "signed", "custom"], default="unit",
                            help="unit: built-ins must score below 0.5; signed: at most 0; custom: at most "
                                 "--threshold")
        parser.add_argument("--threshold", type=float, default=0.0, help="the custom scale's threshold")

    def handle(self, *args, **opts):
        path = Path(opts["reward_file"])
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"Cannot read {path}: {exc}") from None
        if opts["probes"]:
            return self._probes(path, source, opts)
        responses = ""
        if opts["responses"]:
            try:
                responses = sys.stdin.read() if opts["responses"] == "-" else \
                    Path(opts["responses"]).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise CommandError(f"Cannot read the responses file: {exc}") from None
        if not opts["dataset"] and not responses.strip() and not opts["rollouts"]:
            raise CommandError("Give --dataset DATASET, or --responses FILE, or both (or --rollouts JOB).")
        dataset_version = resolve_dataset_version(opts["dataset"], opts["project"]) if opts["dataset"] else None
        project, job_id, step, model_id = self._sources(opts)
        try:
            result = reward_file_check(source=source, entry_point=opts["name"], dataset_version=dataset_version,
                                       split=opts["split"], limit=opts["limit"], responses_text=responses,
                                       project=project, rollout_job_id=job_id, rollout_step=step,
                                       sample_model_id=model_id)
        except SourceError as exc:
            raise CommandError(f"{path}: {exc.message}") from None
        except ApplicationError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(json.dumps(result, indent=opts["indent"] or None, default=str))
        if not result["ok"]:
            line = f" (line {result['error_lineno']})" if result["error_lineno"] else ""
            raise CommandError(result["error"] + line)

    def _sources(self, opts) -> tuple:
        """(project, rollout job id, step, model id) for --rollouts / --model (they need --project)."""
        if not opts["rollouts"] and not opts["model"]:
            return None, None, None, None
        project = Project.objects.filter(slug=opts["project"] or "").first()
        if project is None:
            raise CommandError("--rollouts and --model need --project SLUG (an existing project).")
        job_id = step = model_id = None
        if opts["rollouts"]:
            job, _, at = opts["rollouts"].lstrip("#").partition("@")
            if not job.isdigit() or (at and not at.isdigit()):
                raise CommandError(f"--rollouts {opts['rollouts']}: use a job id, optionally @STEP (e.g. 12@40).")
            job_id, step = int(job), int(at) if at else None
        if opts["model"]:
            from webapp.rewards.rollouts import sample_models

            model = sample_models(project=project).filter(name=opts["model"]).first()
            if model is None:
                raise CommandError(f"No causal LM named '{opts['model']}' with a local folder in {project.slug}.")
            model_id = model.pk
        return project, job_id, step, model_id

    def _probes(self, path: Path, source: str, opts) -> None:
        from webapp.rewards.probes import probe_file_check

        own = []
        if opts["probe_file"]:
            try:
                own = json.loads(Path(opts["probe_file"]).read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise CommandError(f"Cannot read the probe file: {exc}") from None
            if not isinstance(own, list):
                raise CommandError("The probe file must hold a JSON list of probes.")
        try:
            result = probe_file_check(source=source, entry_point=opts["name"], probes=own, scale=opts["scale"],
                                      threshold=opts["threshold"])
        except SourceError as exc:
            raise CommandError(f"{path}: {exc.message}") from None
        except ApplicationError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(json.dumps(result, indent=opts["indent"] or None, default=str))
        if not result["ok"]:
            failing = [f"{r['name']} ({r['reason']})" for r in result["results"] if not r["passed"]]
            raise CommandError(f"{len(failing)} probe(s) fail: " + "; ".join(failing))
