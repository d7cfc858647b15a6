"""`manage.py rollback` and the on-demand evaluation run (a real `python -m training.evaluate` subprocess)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from webapp.monitoring.models import CheckpointEvaluation, EvaluationStatus
from webapp.monitoring.services import evaluation_run
from webapp.runs.models import Checkpoint, Job, RunEvent

pytestmark = pytest.mark.django_db


def test_rollback_command(launched_job, checkpoint, engineer, viewer, capsys):
    job = launched_job()
    checkpoint(job, 10)
    call_command("rollback", str(job.pk), "--step", "10", "--reason", "cli", "--set", "lr=1e-4",
                 "--set", "kl_coef=0.05", "--user", engineer.username)
    child = Job.objects.get(parent=job)
    assert child.resume_checkpoint.step == 10 and child.config["hp"]["lr"] == 1e-4
    assert child.config["hp"]["kl_coef"] == 0.05
    assert f"Run #{child.pk} resumes from step 10" in capsys.readouterr().out
    with pytest.raises(CommandError, match="no checkpoint at step 3"):
        call_command("rollback", str(job.pk), "--step", "3")
    with pytest.raises(CommandError, match="NAME=VALUE"):
        call_command("rollback", str(job.pk), "--step", "10", "--set", "lr")
    with pytest.raises(CommandError, match="not an engineer"):
        call_command("rollback", str(job.pk), "--step", "10", "--user", viewer.username)
    with pytest.raises(CommandError, match="no run #999999"):
        call_command("rollback", "999999", "--step", "10")


def _local_checkpoint(job: Job, model_dir: Path, step: int) -> Checkpoint:
    path = Path(job.run_dir) / "checkpoints" / f"global_step_{step}"
    shutil.copytree(model_dir, path / "model")
    (path / "manifest.json").write_text(json.dumps({"step": step, "format": "local", "lora": False}))
    return Checkpoint.objects.create(job=job, step=step, path=str(path))


@pytest.mark.slow
def test_evaluation_runs_the_evaluator_in_a_subprocess_and_stores_the_result(launched_job, tiny_model_dir,
                                                                             engineer):
    job = launched_job()
    ckpt = _local_checkpoint(job, tiny_model_dir, 5)
    ev = CheckpointEvaluation.objects.create(checkpoint=ckpt, created_by=engineer)
    ev = evaluation_run(evaluation_id=ev.pk)
    assert ev.status == EvaluationStatus.SUCCEEDED, ev.error
    # the checkpoint is the base model itself and the val rows have no reference: every pair ties
    assert ev.n == 6 and ev.win_rate == pytest.approx(0.5) and ev.win_rate_lo < 0.5 < ev.win_rate_hi
    assert Path(ev.samples_path).is_file() and ev.result["reference"] == "base model"
    event = RunEvent.objects.get(job=job, kind="evaluation", step=5)
    assert "wins 0 · ties 6 · losses 0 of 6" in event.message and "ties count ½" in event.message
    assert evaluation_run(evaluation_id=ev.pk).status == EvaluationStatus.SUCCEEDED  # a redelivery does nothing


def test_a_failed_evaluation_keeps_the_evaluators_message(launched_job, engineer):
    job = launched_job()
    path = Path(job.run_dir) / "checkpoints" / "global_step_5"
    path.mkdir(parents=True)
    ckpt = Checkpoint.objects.create(job=job, step=5, path=str(path))
    ev = evaluation_run(evaluation_id=CheckpointEvaluation.objects.create(checkpoint=ckpt).pk)
    assert ev.status == EvaluationStatus.FAILED
    assert "neither model/" in ev.error and "Traceback" not in ev.error
