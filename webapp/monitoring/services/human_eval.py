"""Human evaluation of a checkpoint against the references: its validation responses (side B) and the
dataset's reference responses (side A) in a blind task (source "checkpoint"); judged like every blind task
(services/blind.py)."""
from __future__ import annotations

import json
from typing import Any

from django.db import transaction

from training.rundir import RunDir, read_jsonl
from webapp.core.audit import audit
from webapp.core.services import ApplicationError
from webapp.core.text import count
from webapp.monitoring.models import BlindPair, BlindSource, BlindTask, CheckpointEvaluation, EvaluationStatus
from webapp.monitoring.services.blind import new_pair
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
def human_eval_create(*, checkpoint: Checkpoint, user, limit: int = 100) -> BlindTask:
    """Open a blind task on the checkpoint's validation samples that have a reference response. Anyone in the
    project who may review can judge it (shown on the task; an engineer can assign it instead)."""
    if not 1 <= int(limit) <= MAX_ITEMS:
        raise ApplicationError(f"Choose between 1 and {MAX_ITEMS} items.", field="limit")
    source, step, rows = sample_source(checkpoint)
    rows = [r for r in rows if r.get("reference") not in (None, "") and r.get("output") is not None]
    if not rows:
        raise ApplicationError(f"Step {checkpoint.step} has no validation samples with a reference response. "
                               f"Press Evaluate on this checkpoint first; its samples feed the human evaluation.")
    job = checkpoint.job
    rows = rows[: int(limit)]
    task = BlindTask.objects.create(
        project=job.project, source=BlindSource.CHECKPOINT, b_checkpoint=checkpoint, origin=source,
        created_by=user, title=f"Run #{job.pk} {job.name} · step {checkpoint.step}", status=EvaluationStatus.SUCCEEDED,
        progress=1.0, anyone_may_judge=True,
        sides={"a": {"kind": "reference", "label": "reference"},
               "b": {"kind": "checkpoint", "label": f"step {checkpoint.step}", "checkpoint": checkpoint.pk,
                     "job": job.pk, "step": step}})
    BlindPair.objects.bulk_create([
        new_pair(task, i, response_a=_text(r.get("reference")), response_b=_text(r.get("output")),
                 prompt=r.get("input"), prompt_text=_text(r.get("input")), score_b=_number(r.get("score")),
                 score_a=_number(r.get("reference_score")), auto_outcome=_number(r.get("win")),
                 ground_truth=r.get("gts"), data_source=str(r.get("data_source") or ""),
                 extra_info=r.get("extra_info") if isinstance(r.get("extra_info"), dict) else {})
        for i, r in enumerate(rows)])
    RunEvent.objects.create(job=job, kind="human_eval", step=checkpoint.step, actor=user,
                            message=f"Human evaluation opened on step {checkpoint.step} ({count(len(rows), 'item')})",
                            data={"task": task.pk})
    audit(actor=user, action="human_eval.create", project=job.project, obj=task,
          summary=f"Opened human evaluation of run #{job.pk} step {checkpoint.step} from {source}",
          after={"task": task.pk, "items": len(rows)})
    return task
