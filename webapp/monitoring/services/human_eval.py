"""Blind pairwise human evaluation of a checkpoint's validation responses against their references."""
from __future__ import annotations

import json
import random
from typing import Any

from django.db import transaction

from training.rundir import RunDir, read_jsonl
from webapp.core.audit import audit
from webapp.core.services import ApplicationError
from webapp.monitoring.models import (
    CheckpointEvaluation,
    Choice,
    EvaluationStatus,
    HumanEvalItem,
    HumanEvalTask,
    HumanVerdict,
    Side,
)
from webapp.runs.models import Checkpoint, RunEvent

MAX_ITEMS = 500


def sample_source(checkpoint: Checkpoint) -> tuple[str, int | None, list[dict[str, Any]]]:
    """The validation samples of the checkpoint: training-time ones at its step, else its latest evaluation."""
    from training.ingest import read_samples

    job = checkpoint.job
    if job.run_dir and RunDir(job.run_dir).samples("val", checkpoint.step).exists():
        return (f"validation samples at step {checkpoint.step}", checkpoint.step,
                read_samples(job.run_dir, "val", checkpoint.step))
    evaluation = CheckpointEvaluation.objects.filter(checkpoint=checkpoint, status=EvaluationStatus.SUCCEEDED) \
        .exclude(samples_path="").order_by("-created_at").first()
    if evaluation is not None:
        return f"evaluation #{evaluation.pk}", checkpoint.step, read_jsonl(evaluation.samples_path)
    return "", None, []


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # a chat list
        return "\n".join(f"{m.get('role', '')}: {m.get('content', '')}" if isinstance(m, dict) else str(m)
                         for m in value)
    return json.dumps(value)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and value == value else None


@transaction.atomic
def human_eval_create(*, checkpoint: Checkpoint, user, limit: int = 100, seed: int | None = None) -> HumanEvalTask:
    """Open a blind pairwise task: each item shows the policy's and the reference's response on random sides."""
    if not 1 <= int(limit) <= MAX_ITEMS:
        raise ApplicationError(f"Choose between 1 and {MAX_ITEMS} items.", field="limit")
    source, step, rows = sample_source(checkpoint)
    rows = [r for r in rows if r.get("reference") not in (None, "") and r.get("output") is not None]
    if not rows:
        raise ApplicationError(f"Step {checkpoint.step} has no validation samples with a reference response. "
                               f"Press Evaluate on this checkpoint first; its samples feed the human evaluation.")
    job = checkpoint.job
    task = HumanEvalTask.objects.create(project=job.project, checkpoint=checkpoint, source=source, sample_step=step,
                                        created_by=user, title=f"Run #{job.pk} {job.name} · step {checkpoint.step}")
    rng = random.Random(seed if seed is not None else task.pk * 7919 + checkpoint.pk)
    HumanEvalItem.objects.bulk_create([
        HumanEvalItem(task=task, index=i, prompt=_text(r.get("input")), policy_response=_text(r.get("output")),
                      reference_response=_text(r.get("reference")), policy_score=_number(r.get("score")),
                      reference_score=_number(r.get("reference_score")), auto_outcome=_number(r.get("win")),
                      policy_side=rng.choice([Side.A, Side.B]), data_source=str(r.get("data_source") or ""))
        for i, r in enumerate(rows[: int(limit)])])
    RunEvent.objects.create(job=job, kind="human_eval", step=checkpoint.step, actor=user,
                            message=f"Human evaluation opened on step {checkpoint.step} "
                                    f"({min(len(rows), int(limit))} items)", data={"task": task.pk})
    audit(actor=user, action="human_eval.create", project=job.project, obj=task,
          summary=f"Opened human evaluation of run #{job.pk} step {checkpoint.step} from {source}",
          after={"task": task.pk, "items": min(len(rows), int(limit))})
    return task


def outcome_of(item: HumanEvalItem, choice: str) -> float:
    """The verdict from the policy's side: 1 if the reviewer preferred the policy, 0.5 tie, 0 otherwise."""
    if choice == Choice.TIE:
        return 0.5
    return 1.0 if choice == item.policy_side else 0.0


@transaction.atomic
def human_eval_judge(*, item: HumanEvalItem, reviewer, choice: str) -> HumanVerdict:
    """Record (or change) one reviewer's verdict on an item."""
    if choice not in Choice.values:
        raise ApplicationError(f"Choose one of {', '.join(Choice.values)}, not '{choice}'.", field="choice")
    task = HumanEvalTask.objects.select_for_update().get(pk=item.task_id)
    if not task.is_open:
        raise ApplicationError("This evaluation is closed.")
    previous = HumanVerdict.objects.filter(item=item, reviewer=reviewer).first()
    verdict, _ = HumanVerdict.objects.update_or_create(
        item=item, reviewer=reviewer, defaults={"choice": choice, "outcome": outcome_of(item, choice)})
    audit(actor=reviewer, action="human_eval.judge", project=task.project, obj=verdict,
          summary=f"Human evaluation #{task.pk} item {item.index}: {Choice(choice).label}",
          before={"choice": previous.choice} if previous else None, after={"choice": choice})
    if task.opponent_step is not None:  # vs an earlier checkpoint or the base: is the reward's rise confirmed?
        from webapp.monitoring.services.periodic import gap_check

        gap_check(task)
    return verdict


@transaction.atomic
def human_eval_set_open(*, task: HumanEvalTask, user, is_open: bool) -> HumanEvalTask:
    task.is_open = is_open
    task.save(update_fields=["is_open", "updated_at"])
    audit(actor=user, action="human_eval.open" if is_open else "human_eval.close", project=task.project, obj=task,
          summary=f"{'Reopened' if is_open else 'Closed'} human evaluation #{task.pk}")
    return task
