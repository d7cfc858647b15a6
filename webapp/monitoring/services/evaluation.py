"""On-demand win-rate evaluation of a checkpoint: a Celery task runs `python -m training.evaluate`.

The evaluator runs in a subprocess, never in the worker: it loads models and runs user reward
code (through the sandbox).
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from webapp.core.audit import audit
from webapp.core.queue import EVALUATE_CHECKPOINT, enqueue
from webapp.core.services import ApplicationError
from webapp.monitoring import winrates
from webapp.monitoring.models import CheckpointEvaluation, EvaluationStatus
from webapp.monitoring.services.work import claim
from webapp.notifications.services import notify
from webapp.runs.models import Checkpoint, JobKind, RunEvent
from webapp.runs.selectors import checkpoint_on_disk

EVAL_TIMEOUT_S = int(getattr(settings, "EVALUATION_TIMEOUT_S", 25 * 60))


def _enqueue(evaluation_id: int, queue: str) -> None:
    enqueue(EVALUATE_CHECKPOINT, evaluation_id, queue=queue or "cpu")


@transaction.atomic
def evaluation_request(*, checkpoint: Checkpoint, user) -> CheckpointEvaluation:
    """Queue a win-rate evaluation of the checkpoint on the validation split."""
    job = checkpoint.job
    if job.kind == JobKind.REWARD_MODEL:
        raise ApplicationError("A reward model has no responses to judge; its validation accuracy is on the curves.")
    if not checkpoint_on_disk(checkpoint):
        raise ApplicationError(f"The checkpoint at step {checkpoint.step} is no longer on disk.")
    running = CheckpointEvaluation.objects.filter(
        checkpoint=checkpoint, status__in=[EvaluationStatus.QUEUED, EvaluationStatus.RUNNING]).first()
    if running is not None:
        raise ApplicationError(f"Step {checkpoint.step} is already being evaluated (evaluation #{running.pk}).")
    evaluation = CheckpointEvaluation.objects.create(checkpoint=checkpoint, created_by=user)
    audit(actor=user, action="checkpoint.evaluate", project=job.project, obj=checkpoint,
          summary=f"Requested a win-rate evaluation of run #{job.pk} step {checkpoint.step}",
          after={"evaluation": evaluation.pk})
    transaction.on_commit(lambda: _enqueue(evaluation.pk, job.queue))
    return evaluation


def evaluation_command(evaluation: CheckpointEvaluation, out_file: Path) -> list[str]:
    from training.backends.base import python_executable

    ckpt = evaluation.checkpoint
    return [python_executable(), "-m", "training.evaluate", "--run-dir", str(ckpt.job.run_dir),
            "--checkpoint", str(ckpt.path), "--out", str(out_file)]


def evaluation_run(*, evaluation_id: int) -> CheckpointEvaluation:
    """Run the evaluator for a queued evaluation and store its result (idempotent: claims the row first)."""
    from training.backends.base import REPO_ROOT

    evaluation, claimed = claim(CheckpointEvaluation, evaluation_id, "checkpoint__job")
    if not claimed:
        return evaluation  # another worker has it, or it already finished
    ckpt, job = evaluation.checkpoint, evaluation.checkpoint.job
    out_dir = Path(job.run_dir) / "evaluations" / str(evaluation.pk)
    out_dir.mkdir(parents=True, exist_ok=True)
    out_file = out_dir / "result.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in [str(REPO_ROOT), os.environ.get("PYTHONPATH")]
                                                      if p), "PYTHONUNBUFFERED": "1", "WANDB_MODE": "disabled"}
    try:
        proc = subprocess.run(evaluation_command(evaluation, out_file), cwd=str(REPO_ROOT), env=env,
                              capture_output=True, text=True, timeout=EVAL_TIMEOUT_S)
        (out_dir / "log.txt").write_text(proc.stdout + proc.stderr)
        error = "" if proc.returncode == 0 else (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
    except subprocess.TimeoutExpired:
        error = f"The evaluation took longer than {EVAL_TIMEOUT_S} s and was stopped."
    result = {}
    if not error:
        try:
            result = json.loads(out_file.read_text())
        except (OSError, ValueError) as exc:
            error = f"The evaluator wrote no readable result: {exc}"
    evaluation.finished_at = timezone.now()
    if error:
        evaluation.status, evaluation.error = EvaluationStatus.FAILED, error[:2000]
        evaluation.save()
        RunEvent.objects.create(job=job, kind="evaluation", step=ckpt.step,
                                message=f"Evaluation of step {ckpt.step} failed: {error}"[:500],
                                data={"evaluation": evaluation.pk})
        notify(job.project, "evaluation.finished", job=job, message=f"Evaluation of step {ckpt.step} failed: {error}",
               data={"evaluation": evaluation.pk, "step": ckpt.step, "status": "failed"})
        return evaluation
    evaluation.status = EvaluationStatus.SUCCEEDED
    evaluation.win_rate, evaluation.win_rate_lo = result.get("win_rate"), result.get("lo")
    evaluation.win_rate_hi, evaluation.n = result.get("hi"), int(result.get("n") or 0)
    evaluation.samples_path = str(result.get("samples_path") or "")
    evaluation.result = result
    evaluation.save()
    text = winrates.text(winrates.from_evaluation(evaluation))
    RunEvent.objects.create(job=job, kind="evaluation", step=ckpt.step,
                            message=f"Evaluated step {ckpt.step}: {text}",
                            data={"evaluation": evaluation.pk, "win_rate": evaluation.win_rate,
                                  "lo": evaluation.win_rate_lo, "hi": evaluation.win_rate_hi, "n": evaluation.n,
                                  "wins": result.get("wins"), "ties": result.get("ties"),
                                  "losses": result.get("losses")})
    notify(job.project, "evaluation.finished", job=job, message=f"Evaluated step {ckpt.step}: {text}",
           data={"evaluation": evaluation.pk, "step": ckpt.step, "win_rate": evaluation.win_rate, "n": evaluation.n})
    return evaluation
