"""`manage.py launch_job`: the launch form on the command line (same validation, same services)."""
from __future__ import annotations

import sys
import time

from django.core.management.base import BaseCommand, CommandError

from training import hparams as cfg
from training.jobconfig import parse_set_args
from training.reward_mix import SHAPINGS
from webapp.core.commands import command_engineer
from webapp.core.models import Project
from webapp.core.services import ApplicationError
from webapp.runs.models import FINAL_STATES, Job, JobState
from webapp.runs.services.inputs import dry_run, plan_inputs
from webapp.runs.services.lengths import lengths_text
from webapp.runs.services.plan import job_create
from webapp.runs.services.start import job_launch
from webapp.runs.services.sync import sync_job

WATCH = ("critic/score/mean", "actor/kl_loss", "distill/loss", "distill/top1_agreement", "rm/loss", "rm/accuracy")


class Command(BaseCommand):
    help = "Validate and launch a training job (GRPO, distillation, reward model) like the launch form does."

    def add_arguments(self, parser):
        parser.add_argument("--project", required=True, help="project slug")
        parser.add_argument("--kind", required=True, choices=cfg.KINDS)
        parser.add_argument("--preset", required=True, choices=list(cfg.PRESETS))
        parser.add_argument("--backend", choices=cfg.BACKENDS, help="default: the preset's backend")
        parser.add_argument("--dataset", help="NAME[:VERSION] or a version id (default: newest fitting version)")
        parser.add_argument("--reward", action="append", help="reward function NAME[:VERSION] or reward model name "
                                                              "(repeatable, weight 1)")
        parser.add_argument("--shaping", choices=SHAPINGS)
        parser.add_argument("--model", help="registered base model name (default: demo-tiny)")
        parser.add_argument("--teacher", help="distillation teacher name (default: demo-teacher)")
        parser.add_argument("--set", dest="set_items", action="extend", nargs="+", default=[], metavar="KEY=VALUE",
                            help="override a setting, e.g. --set lr=1e-5 lora.rank=8 verl.rollout_engine=sglang")
        parser.add_argument("--name", default="")
        parser.add_argument("--include-unreviewed", action="store_true")
        parser.add_argument("--user", help="username recorded as the launcher (default: none)")
        parser.add_argument("--dry-run", action="store_true", help="print the run dir and the exact command; "
                                                                   "launch nothing")
        parser.add_argument("--show-config", action="store_true", help="with --dry-run: also print the config YAML")
        parser.add_argument("--wait", action="store_true", help="follow the job until it ends")
        parser.add_argument("--here", action="store_true", help="start the run from this process instead of "
                                                                "waiting for a Celery worker")
        parser.add_argument("--timeout", type=float, default=0, help="with --wait: give up after N seconds")

    def handle(self, *args, **o):
        project = Project.objects.filter(slug=o["project"]).first()
        if project is None:
            raise CommandError(f"No project {o['project']!r}.")
        user = command_engineer(o["user"], project)
        try:
            overrides = parse_set_args(o["set_items"])
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        data = {"kind": o["kind"], "preset": o["preset"],
                "backend": o["backend"] or cfg.PRESETS[o["preset"]].get("backend", "local"),
                "dataset": o["dataset"], "reward": o["reward"], "shaping": o["shaping"], "model": o["model"],
                "teacher": o["teacher"], "set": overrides, "include_unreviewed": o["include_unreviewed"]}
        try:
            plan = plan_inputs(project, data)
            if o["dry_run"]:
                return self._dry_run(plan, o["show_config"])
            job = job_create(plan=plan, user=user, name=o["name"] or None)
        except ApplicationError as exc:
            raise CommandError(self._errors(exc)) from None
        self.stdout.write(self.style.SUCCESS(f"Job #{job.pk} queued on the {job.queue} queue: {job.name}"))
        if o["here"]:
            self.stdout.write(f"  launch: {job_launch(job.pk)}")
        if o["wait"]:
            return self._wait(job, o["timeout"], o["here"])

    def _errors(self, exc: ApplicationError) -> str:
        errors = getattr(exc, "errors", None) or {exc.field or "error": exc.message}
        return "the job was refused:\n" + "\n".join(f"  {key}: {msg}" for key, msg in errors.items())

    def _dry_run(self, plan, show_config: bool) -> None:
        out = dry_run(plan)
        self.stdout.write(f"Run directory: {out['run_dir']}")
        self.stdout.write(out["command"].rstrip("\n"))
        if out.get("lengths"):
            self.stdout.write(lengths_text(out["lengths"]))
        for key, msg in out["warnings"].items():
            self.stderr.write(self.style.WARNING(f"warning: {key}: {msg}"))
        if show_config:
            self.stdout.write("\n# config (job.json)\n" + out["config_yaml"])

    def _wait(self, job: Job, timeout: float, here: bool) -> None:
        start, last = time.time(), None
        while True:
            sync_job(job)
            job.refresh_from_db()
            if job.state == JobState.QUEUED and not here and time.time() - start > 60 and last is None:
                self.stderr.write(self.style.WARNING(
                    f"job #{job.pk} is still queued: is a Celery worker consuming the {job.queue!r} queue? "
                    f"(celery -A jobs worker -Q {job.queue}), or rerun with --here"))
                last = "warned"
            if job.last_step != getattr(self, "_step", None):
                self._step = job.last_step
                vals = dict(job.metric_points.filter(step=job.last_step, name__in=WATCH).values_list("name", "value"))
                shown = " ".join(f"{k}={v:.4g}" for k, v in vals.items() if v is not None)
                total = (job.config or {}).get("total_steps") or "?"
                self.stdout.write(f"  [{job.state}] step {job.last_step}/{total} {shown}")
            if job.state in FINAL_STATES:
                break
            if timeout and time.time() - start > timeout:
                raise CommandError(f"job #{job.pk} still {job.state} after {timeout:.0f} s")
            time.sleep(2)
        style = self.style.SUCCESS if job.state == JobState.SUCCEEDED else self.style.ERROR
        self.stdout.write(style(f"Job #{job.pk} {job.state}" + (f": {job.error.splitlines()[0]}" if job.error else "")))
        if job.state != JobState.SUCCEEDED:
            sys.exit(1)
