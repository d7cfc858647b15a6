"""`python manage.py arena create|status|export`: the arena from the command line, through the same services.

    manage.py arena create acme --a 7@100 --b 7@400 --prompt "2+3=" --prompt "4+1=" --seed 1 --wait
    manage.py arena create acme --a model:3 --b ckpt:12 --dataset-version 5 --split val --limit 50
    manage.py arena status 4
    manage.py arena close 4 --user alice
    manage.py arena export 4 --name arena-prefs --user alice

A side is `RUN@STEP` (a checkpoint of a run), `ckpt:<checkpoint id>` or `model:<registered model id>`.
`--wait` generates in this process instead of on a worker. Judging happens in the browser; results show once the
arena is closed (`manage.py arena close 4`).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from webapp.core.commands import command_engineer
from webapp.core.models import Project
from webapp.core.services import ApplicationError
from webapp.datasets.models import DatasetVersion
from webapp.monitoring.blind_results import blind_results
from webapp.monitoring.models import BlindSource, BlindTask
from webapp.monitoring.services import arena as svc
from webapp.monitoring.services.arena_export import arena_export
from webapp.monitoring.services.blind import progress_counts, task_set_open
from webapp.runs.models import Checkpoint


def side_ref(project: Project, value: str) -> str:
    m = re.fullmatch(r"(\d+)@(\d+)", value or "")
    if not m:
        return value
    ckpt = Checkpoint.objects.filter(job_id=int(m.group(1)), step=int(m.group(2)), job__project=project).first()
    if ckpt is None:
        raise CommandError(f"Run #{m.group(1)} of {project.slug} has no checkpoint at step {m.group(2)}.")
    return f"ckpt:{ckpt.pk}"


class Command(BaseCommand):
    help = "Start an arena between two models, follow it, or export its judgements as a preference dataset."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="start an arena")
        create.add_argument("project", help="project slug")
        create.add_argument("--a", required=True, help="side A: RUN@STEP, ckpt:ID or model:ID")
        create.add_argument("--b", required=True, help="side B: RUN@STEP, ckpt:ID or model:ID")
        create.add_argument("--prompt", action="append", default=[], help="a prompt (repeatable)")
        create.add_argument("--prompts-file", help="a file with one prompt per line")
        create.add_argument("--dataset-version", type=int, help="take prompts from this dataset version id")
        create.add_argument("--split", default="val", choices=["val", "train", "all"])
        create.add_argument("--limit", type=int, default=20)
        create.add_argument("--max-response-length", type=int, default=None, help="tokens per answer at most")
        create.add_argument("--temperature", type=float, default=None)
        create.add_argument("--top-p", type=float, default=None)
        create.add_argument("--seed", type=int, default=None)
        create.add_argument("--title", default="")
        create.add_argument("--wait", action="store_true", help="generate here and now instead of on a worker")
        create.add_argument("--user", default="", help="username recorded as the actor (an engineer)")
        status = sub.add_parser("status", help="an arena's progress and results")
        status.add_argument("arena", type=int)
        status.add_argument("--json", action="store_true")
        close = sub.add_parser("close", help="close an arena: no more verdicts, the results show")
        close.add_argument("arena", type=int)
        close.add_argument("--user", default="", help="username recorded as the actor (an engineer)")
        export = sub.add_parser("export", help="verdicts -> a new preference dataset version")
        export.add_argument("arena", type=int)
        export.add_argument("--name", default="", help="dataset name (default arena-<id>-preferences)")
        export.add_argument("--split", default="10%", help="validation split: a share (10%%) or a row count")
        export.add_argument("--agreed-only", action="store_true",
                            help="only judgements that agree with their pair's majority verdict")
        export.add_argument("--user", default="", help="username recorded as the actor (an engineer)")

    def handle(self, *args, **opts):
        try:
            getattr(self, f"_{opts['action']}")(opts)
        except ApplicationError as exc:
            raise CommandError(exc.message) from None

    def _create(self, opts):
        project = Project.objects.filter(slug=opts["project"]).first()
        if project is None:
            raise CommandError(f"There is no project '{opts['project']}'.")
        user = command_engineer(opts["user"], project)
        version, prompts = None, list(opts["prompt"])
        if opts["prompts_file"]:
            try:
                prompts += svc.prompts_typed(Path(opts["prompts_file"]).read_text(encoding="utf-8"))
            except OSError as exc:
                raise CommandError(f"Cannot read {opts['prompts_file']}: {exc.strerror}") from None
        if opts["dataset_version"]:
            version = DatasetVersion.objects.filter(pk=opts["dataset_version"]).select_related("dataset").first()
            prompts += svc.prompts_from_version(project, version, opts["split"], opts["limit"])
        sampling = {"max_response_length": opts["max_response_length"], "temperature": opts["temperature"],
                    "top_p": opts["top_p"]}
        arena = svc.arena_create(project=project, user=user, side_a=side_ref(project, opts["a"]),
                                 side_b=side_ref(project, opts["b"]), prompts=prompts, sampling=sampling,
                                 seed=opts["seed"], dataset_version=version, title=opts["title"])
        self.stdout.write(f"Arena #{arena.pk}: {arena.title} ({len(prompts)} prompts, seed {arena.seed})")
        if opts["wait"]:
            arena = svc.arena_generate(arena_id=arena.pk)
            if arena.error:
                raise CommandError(f"Arena #{arena.pk} failed: {arena.error}")
            self.stdout.write(self.style.SUCCESS(f"Generated {arena.pairs.count()} pairs with {arena.engine}."))

    @staticmethod
    def _arena(pk: int) -> BlindTask:
        arena = BlindTask.objects.filter(pk=pk, source=BlindSource.ARENA).select_related("project").first()
        if arena is None:
            raise CommandError(f"There is no arena #{pk}.")
        return arena

    def _status(self, opts):
        arena = self._arena(opts["arena"])
        if opts["json"]:
            from webapp.monitoring.api_blind import task_dict

            self.stdout.write(json.dumps(task_dict(arena, arena.created_by), indent=2, default=str))
            return
        error = f" {arena.error}" if arena.error else ""
        self.stdout.write(f"Arena #{arena.pk}: {arena.title}\n  A: {arena.label('a')}\n  B: {arena.label('b')}\n"
                          f"  status: {arena.status} ({round(100 * arena.progress)}%){error}")
        if arena.status != "succeeded":
            return
        if arena.is_open:
            p = progress_counts(arena)
            self.stdout.write(f"  open: {p['judged_pairs']} of {p['pairs']} pairs judged so far; the results show "
                              f"once it is closed (manage.py arena close {arena.pk})")
            return
        res = blind_results(arena)
        o = res.outcome
        self.stdout.write(f"  {res.judged_pairs} of {res.pairs} pairs judged ({res.judgements} judgements): "
                          f"B wins {o['b'].count}, ties {o['tie'].count}, both bad {o['both_bad'].count}, "
                          f"identical {o['identical'].count}, A wins {o['a'].count}")
        if res.decisive.n:
            self.stdout.write(f"  B wins {res.decisive.count} of the {res.decisive.n} pairs that have a winner "
                              f"({res.decisive.rate:.0%}, 95% [{res.decisive.lo:.0%}, {res.decisive.hi:.0%}])"
                              f"{' (too few judgements to tell)' if res.too_few else ''}")

    def _close(self, opts):
        arena = self._arena(opts["arena"])
        task_set_open(task=arena, user=command_engineer(opts["user"], arena.project), is_open=False)
        self.stdout.write(self.style.SUCCESS(f"Arena #{arena.pk} is closed: `manage.py arena status {arena.pk}` "
                                             "shows its results."))

    def _export(self, opts):
        arena = self._arena(opts["arena"])
        user = command_engineer(opts["user"], arena.project)
        version = arena_export(arena=arena, user=user, name=opts["name"], split=opts["split"],
                               agreed_only=opts["agreed_only"])
        self.stdout.write(self.style.SUCCESS(f"Exported {version.row_count} preference pairs as {version} "
                                             f"(dataset version id {version.pk})."))
