"""Periodic human evaluation: every N checkpoints a blind task opens (the checkpoint, side B, against the
previous evaluated checkpoint or the base model, side A, on held-out prompts), assigned to the project's reviewers.

The schedule is the job's config["human_eval"] (services/gap.py reads it). `schedule_process(job)` runs after
every sync (hooks.py) and is idempotent: one periodic task per checkpoint (a unique constraint), however often
it runs. A worker generates both sides as for every blind task (services/generation.py: the same sampling for
both, greedy) and opens the task, assigned.
The reward-vs-human gap is checked when the task closes (services/gap.py).
"""
from __future__ import annotations

import logging
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from training.rundir import RunDir, read_jsonl
from webapp.core.models import ROLE_RANK, Membership, Role
from webapp.core.queue import PREPARE_HUMAN_EVAL, enqueue
from webapp.core.services import ApplicationError
from webapp.core.text import count
from webapp.datasets.models import DatasetRow
from webapp.monitoring.models import BlindSource, BlindTask, EvaluationStatus
from webapp.monitoring.services.gap import schedule_of
from webapp.monitoring.services.generation import generate
from webapp.monitoring.services.judges import judge_request
from webapp.notifications.services import notify
from webapp.runs.models import Checkpoint, CheckpointStatus, Job, RunEvent
from webapp.runs.selectors import checkpoint_on_disk

logger = logging.getLogger(__name__)


def reviewers(project) -> list:
    """The project's reviewers; when it has none, every member who may review (engineers, admins)."""
    members = list(Membership.objects.filter(project=project).select_related("user"))
    exact = [m.user for m in members if m.role == Role.REVIEWER]
    return exact or [m.user for m in members if ROLE_RANK[Role(m.role)] >= ROLE_RANK[Role.REVIEWER]]


def _opponent(job: Job, ckpts: list[Checkpoint], k: int, sched: dict) -> dict[str, Any]:
    """Side A of checkpoint number k (0-based): "previous" is the checkpoint evaluated last time (N back),
    else the nearest earlier one still on disk, else the base model (step 0)."""
    if sched.get("against") != "base":
        back = k - int(sched["every"])
        for earlier in ([ckpts[back]] if back >= 0 else []) + [ckpts[j] for j in range(k - 1, -1, -1)]:
            if checkpoint_on_disk(earlier):
                return {"kind": "checkpoint", "label": f"step {earlier.step}", "checkpoint": earlier.pk,
                        "job": job.pk, "step": earlier.step, "path": earlier.path, "base_model": _base_path(job)}
    base = job.base_model if job.base_model_id else None
    return {"kind": "model", "label": "base model", "model": base.pk if base else None, "step": 0,
            "path": _base_path(job), "base_model": None, "base_model_name": base.name if base else ""}


def _base_path(job: Job) -> str | None:
    """The run's base model folder: a checkpoint's tokenizer (and a LoRA adapter's base)."""
    return job.base_model.path if job.base_model_id and job.base_model.path else None


def _held_out_rows(job: Job, sched: dict) -> tuple[str, list[dict]]:
    """Where the prompts come from, and the rows with what a reward needs to score them (as in training)."""
    limit = max(1, min(200, int(sched.get("items") or 20)))
    version_id = sched.get("dataset_version")
    if version_id:
        split = sched.get("split") or "val"
        rows = DatasetRow.objects.filter(version_id=version_id, version__dataset__project=job.project,
                                         split=split).order_by("index")[:limit]
        return f"dataset version #{version_id} ({split})", [
            {"prompt": r.prompt, "ground_truth": r.ground_truth or None, "data_source": r.data_source,
             "extra_info": r.extra_info or {}} for r in rows]
    path = RunDir(job.run_dir).data("val")
    return "the run's validation split", [
        {"prompt": r.get("prompt"), "ground_truth": r.get("ground_truth"), "data_source": r.get("data_source"),
         "extra_info": r.get("extra_info") or {}} for r in read_jsonl(path)[:limit]]


def schedule_process(job: Job) -> list[BlindTask]:
    """Open the periodic tasks that are due (every N-th checkpoint); returns the new ones."""
    sched = schedule_of(job)
    if sched is None or not job.run_dir:
        return []
    every = int(sched["every"])
    ckpts = list(Checkpoint.objects.filter(job=job).order_by("step"))
    done = set(BlindTask.objects.filter(b_checkpoint__job=job, source=BlindSource.PERIODIC)
               .values_list("b_checkpoint_id", flat=True))
    created = []
    for k, ckpt in enumerate(ckpts):
        if (k + 1) % every or ckpt.pk in done or ckpt.status != CheckpointStatus.AVAILABLE:
            continue
        try:
            task = _open_scheduled(job, ckpt, ckpts, k, sched)
        except IntegrityError:  # another sync opened it a moment ago
            continue
        created.append(task)
    return created


def _open_scheduled(job: Job, ckpt: Checkpoint, ckpts: list[Checkpoint], k: int, sched: dict) -> BlindTask:
    a = _opponent(job, ckpts, k, sched)
    origin, rows = _held_out_rows(job, sched)
    b = {"kind": "checkpoint", "label": f"step {ckpt.step}", "checkpoint": ckpt.pk, "job": job.pk, "step": ckpt.step,
         "path": ckpt.path, "base_model": _base_path(job)}
    with transaction.atomic():
        task = BlindTask.objects.create(
            project=job.project, source=BlindSource.PERIODIC, sides={"a": a, "b": b}, b_checkpoint=ckpt,
            a_checkpoint_id=a.get("checkpoint"), a_model_id=a.get("model"), origin=origin, prompts=rows,
            sampling={"max_response_length": int(sched.get("max_response_length") or 64), "temperature": 0.0,
                      "top_p": 1.0},
            is_open=False, title=f"Run #{job.pk} {job.name} · step {ckpt.step} vs {a['label']}")
        if not rows or not a["path"]:  # nothing to generate: failed at once, with the reason
            task.status, task.finished_at = EvaluationStatus.FAILED, timezone.now()
            task.error = ("No held-out prompts: " + origin) if not rows else "No opponent model on disk."
            task.save(update_fields=["status", "error", "finished_at", "updated_at"])
        else:
            transaction.on_commit(lambda: enqueue(PREPARE_HUMAN_EVAL, task.pk, queue=job.queue or "cpu"))
        RunEvent.objects.create(job=job, kind="human_eval", step=ckpt.step,
                                message=f"Scheduled human evaluation of step {ckpt.step} vs {a['label']} "
                                        f"({count(len(rows), 'prompt')} from {origin})", data={"task": task.pk})
    return task


def human_eval_prepare(*, task_id: int) -> BlindTask:
    """Generate both sides of a periodic task (services/generation.py), then open and assign it (once)."""
    task, generated = generate(task_id=task_id)
    if generated and task.status == EvaluationStatus.SUCCEEDED:
        return open_assigned(task)
    return task


@transaction.atomic
def open_assigned(task: BlindTask) -> BlindTask:
    """Open a generated periodic task to the project's reviewers (only they may judge it), notify them, and queue
    the run's reward (when it has one) as an automatic judge of the same pairs."""
    task.is_open, task.anyone_may_judge = True, False
    task.save(update_fields=["is_open", "anyone_may_judge", "updated_at"])
    people = reviewers(task.project)
    task.assignees.set(people)
    job = task.b_checkpoint.job
    names = ", ".join(u.username for u in people) or "nobody (the project has no reviewers)"
    if (job.reward_spec or {}).get("components"):  # the run's own reward judges the same pairs, for the chart
        try:
            judge_request(task=task, user=None, judge="reward")
        except ApplicationError as exc:
            logger.warning("no automatic judge for blind task %s: %s", task.pk, exc.message)
    step = task.b_checkpoint.step
    notify(task.project, "human_eval.assigned", job=job,
           message=f"Blind human evaluation #{task.pk} of step {step} vs {task.opponent} "
                   f"({count(task.pairs.count(), 'pair')}) is open for: {names}",
           data={"task": task.pk, "step": step, "reviewers": [u.username for u in people],
                 "url": f"/p/{task.project.slug}/monitor/blind/{task.pk}/judge/"})
    return task
