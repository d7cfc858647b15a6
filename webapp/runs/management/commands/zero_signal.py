"""`manage.py zero_signal PROJECT DATASET (--model NAME | --checkpoint ID) --reward NAME[:N] [...]`.

Runs a zero-signal dry run of a verifiable prompt set here, in this process's child (no worker needed),
with its progress on stderr, and prints which prompts tie; `--derive` then makes the version without
them. `--show RUN_ID` prints a stored dry run; `--json` prints the result as JSON.
"""
from __future__ import annotations

import json
import sys

from django.core.management.base import BaseCommand, CommandError
from django.http import Http404

from webapp.core.commands import command_engineer
from webapp.core.models import Project
from webapp.core.services import ApplicationError
from webapp.datasets import selectors
from webapp.registry.models import ModelEntry
from webapp.rewards.models import RewardVersion
from webapp.runs.models import ZeroSignalRun, ZeroSignalStatus
from webapp.runs.services import zero_signal as zs


class Command(BaseCommand):
    help = "Find the prompts whose sampled responses all get the same reward (no GRPO signal)."

    def add_base_argument(self, parser, *args, **kwargs):
        if "--version" not in args:  # ours selects a dataset version, not Django's version
            super().add_base_argument(parser, *args, **kwargs)

    def add_arguments(self, parser):
        parser.add_argument("project", help="project slug")
        parser.add_argument("dataset", nargs="?", help="prompt-set name or id")
        parser.add_argument("--version", type=int, default=None, help="version number (default: the latest)")
        parser.add_argument("--model", default="", help="a registered model's name")
        parser.add_argument("--checkpoint", type=int, default=None, help="or a checkpoint's id")
        parser.add_argument("--reward", default="", metavar="NAME[:N]", help="reward function (latest version, or vN)")
        parser.add_argument("--group-size", type=int, default=None, help="samples per prompt (default 4)")
        parser.add_argument("--max-response-length", type=int, default=None,
                            help="tokens per sample at most (default 64)")
        parser.add_argument("--max-prompts", type=int, default=None, help="the first N rows (default 2000)")
        parser.add_argument("--temperature", type=float, default=None)
        parser.add_argument("--seed", type=int, default=None)
        parser.add_argument("--batch", type=int, default=None, help="batch size for the effective batch size")
        parser.add_argument("--derive", action="store_true", help="then create the version without the tied prompts")
        parser.add_argument("--show", type=int, default=None, metavar="RUN_ID", help="print a stored dry run")
        parser.add_argument("--json", action="store_true", help="print the result as JSON")
        parser.add_argument("--user", default="", help="username recorded (an engineer of the project)")

    def handle(self, *args, **opts):
        project = Project.objects.filter(slug=opts["project"]).first()
        if project is None:
            raise CommandError(f"There is no project '{opts['project']}'.")
        user = command_engineer(opts["user"], project)
        if opts["show"] is not None:
            run = ZeroSignalRun.objects.filter(pk=opts["show"], version__dataset__project=project).first()
            if run is None:
                raise CommandError(f"There is no dry run {opts['show']} in {project.slug}.")
        else:
            run = self._start(project, user, opts)
        payload = zs.run_payload(run, opts["batch"])
        if opts["json"]:
            self.stdout.write(json.dumps(payload, indent=1))
        else:
            self._print(payload)
        if run.status == ZeroSignalStatus.FAILED:
            raise CommandError(run.error)
        if opts["derive"]:
            try:
                version = zs.dry_run_derive(run=run, user=user)
            except ApplicationError as exc:
                raise CommandError(exc.message) from None
            self.stdout.write(f"created {version} without the {version.lineage['rows_dropped']:,} tied prompts "
                              f"({version.row_count:,} rows)")

    def _start(self, project, user, opts) -> ZeroSignalRun:
        if not opts["dataset"]:
            raise CommandError("Name the prompt set (or --show RUN_ID).")
        try:
            version = selectors.version_get(project=project, dataset_id=opts["dataset"], number=opts["version"])
        except Http404:
            raise CommandError(f"There is no ready version of '{opts['dataset']}' in {project.slug}.") from None
        model_id = None
        if opts["model"]:
            model = ModelEntry.objects.filter(project=project, name=opts["model"]).first()
            if model is None:
                raise CommandError(f"There is no model '{opts['model']}' in {project.slug}.")
            model_id = model.pk
        name, _, number = opts["reward"].partition(":")
        rewards = RewardVersion.objects.filter(function__project=project, function__name=name)
        reward = (rewards.filter(number=int(number.lstrip("v"))) if number.lstrip("v").isdigit()
                  else rewards).order_by("-number").first()
        if reward is None:
            raise CommandError(f"There is no reward '{opts['reward']}' in {project.slug} (--reward NAME[:N]).")
        params = {"group_size": opts["group_size"], "max_response_length": opts["max_response_length"],
                  "max_prompts": opts["max_prompts"],
                  "temperature": opts["temperature"], "seed": opts["seed"]}
        try:
            run = zs.dry_run_request(version=version, user=user, model_id=model_id, checkpoint_id=opts["checkpoint"],
                                     reward_version_id=reward.pk, params=params, enqueue_task=False)
        except ApplicationError as exc:
            raise CommandError(exc.message) from None

        def progress(fraction: float) -> None:
            sys.stderr.write(f"\rsampling and scoring… {fraction:.0%}   ")
            sys.stderr.flush()

        zs.dry_run_execute(run_id=run.pk, on_progress=progress)
        sys.stderr.write("\n")
        run.refresh_from_db()
        return run

    def _print(self, p: dict) -> None:
        self.stdout.write(f"dry run {p['id']} of {p['dataset']} v{p['version']}: {p['status']} ({p['source']}, "
                          f"reward {p['reward']})")
        s = p["summary"]
        if not s:
            return
        share = "n/a" if s["tied_share"] is None else f"{s['tied_share']:.1%}"
        self.stdout.write(f"{s['tied']} of {s['counted']} prompts tie ({share}): {s['all_right']} all right, "
                          f"{s['all_wrong']} all wrong; {s['group_size']} samples each")
        self.stdout.write(f"expected effective batch size: {p['effective_batch']} of {p['batch']} prompts per step")
        if p["tied_indices"]:
            shown = ", ".join(map(str, p["tied_indices"][:50]))
            self.stdout.write(f"tied rows: {shown}{' …' if len(p['tied_indices']) > 50 else ''}")
