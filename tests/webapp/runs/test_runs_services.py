"""Job services: create pins data and rewards, launch claims once and writes the run dir, cancel, resume, rollback."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.conf import settings

from webapp.core.models import AuditLog
from webapp.core.services import ApplicationError
from webapp.runs.models import Checkpoint, Job, JobAttempt, JobState, RunEvent
from webapp.runs.services import (
    JobValidationError,
    job_cancel,
    job_create,
    job_create_child,
    job_launch,
    job_resume,
)
from webapp.runs.services.data import expand_ranges

pytestmark = pytest.mark.django_db


def _create(project, user, version, model, spec, **kw):
    args = {"project": project, "user": user, "kind": "grpo", "backend": "local", "preset": "demo-cpu",
                "hp_overrides": {"max_steps": 10}, "dataset_version": version, "reward_spec": spec, "base_model": model,
                "include_unreviewed": True}
    args.update(kw)
    return job_create(**args)


def test_job_create_pins_data_and_rewards_and_writes_nothing(project, engineer, prompts_version, tiny_model,
                                                            reward_spec, reward_fn, no_enqueue,
                                                            django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        job = _create(project, engineer, prompts_version, tiny_model, reward_spec)
    assert job.state == JobState.QUEUED and job.queue == "cpu"
    assert list(job.reward_versions.all()) == [reward_fn.latest_version]
    manifest = job.data_manifest
    assert manifest["dataset"]["version_id"] == prompts_version.pk
    assert manifest["counts"] == {"included": 44, "train": 36, "val": 8, "excluded": 0}
    included = sorted(expand_ranges(manifest["included_ranges"]))
    assert included == sorted(prompts_version.rows.values_list("pk", flat=True))
    assert job.config["hp"]["max_steps"] == 10 and job.config["total_steps"] == 10
    assert job.attempts.get().state == JobState.QUEUED
    assert no_enqueue == [(job.pk, "cpu", None)]
    assert not any(Path(settings.RUNS_ROOT).iterdir())  # nothing on disk until a worker launches it
    assert AuditLog.objects.filter(action="job.create", object_id=str(job.pk)).exists()


def test_job_create_refuses_with_every_field_error(project, engineer, prefs_version, tiny_model, no_enqueue):
    with pytest.raises(JobValidationError) as exc:
        _create(project, engineer, prefs_version, tiny_model, {"components": []}, hp_overrides={"group_size": 1})
    assert set(exc.value.errors) >= {"group_size", "reward_spec", "dataset_version"}
    assert Job.objects.count() == 0


def test_prompt_longer_than_max_prompt_length_is_refused_in_tokens(project, engineer, prompts_version, tiny_model,
                                                                    reward_spec, no_enqueue):
    with pytest.raises(JobValidationError) as exc:
        _create(project, engineer, prompts_version, tiny_model, reward_spec,
                hp_overrides={"max_prompt_length": 3, "max_response_length": 4})
    assert "4 tokens" in exc.value.errors["max_prompt_length"]  # "a+b=" is 4 characters = 4 char tokens


def test_queue_routing_gpu_for_verl_and_cuda(project, engineer, prompts_version, tiny_model, reward_spec,
                                             no_enqueue):
    job = _create(project, engineer, prompts_version, tiny_model, reward_spec, hp_overrides={"device": "cuda"})
    assert job.queue == "gpu"
    job = _create(project, engineer, prompts_version, tiny_model, reward_spec, backend="verl",
                  preset="qwen2.5-0.5b-1gpu",
                  hp_overrides={"max_prompt_length": 16, "max_response_length": 16, "max_seq_len": 32})
    assert job.queue == "gpu"


def test_job_launch_claims_once_and_writes_the_run_dir(project, engineer, prompts_version, tiny_model, reward_spec,
                                                       reward_fn, no_enqueue, fake_supervisor):
    job = _create(project, engineer, prompts_version, tiny_model, reward_spec)
    assert job_launch(job.pk) == "launched"
    assert job_launch(job.pk) == "skipped"  # a redelivered task does not start a second run
    assert len(fake_supervisor) == 1
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.attempt_count == 1
    run_dir = Path(job.run_dir)
    assert run_dir.parent == (Path(settings.RUNS_ROOT) / project.slug).resolve()
    assert re.fullmatch(rf"{job.pk}-[0-9a-f]{{12}}", run_dir.name)  # the job id plus a random run id
    spec = json.loads((run_dir / "job.json").read_text())
    assert spec["kind"] == "grpo" and spec["model"]["path"] == str(tiny_model.path)
    assert spec["hp"]["max_steps"] == 10 and spec["resume_from"] is None
    comp = spec["reward"]["components"][0]
    assert comp["path"] == "reward/exact_match_v1.py" and comp["name"] == "compute_score"
    assert (run_dir / comp["path"]).read_text() == reward_fn.latest_version.source
    train = [json.loads(x) for x in (run_dir / "data" / "train.jsonl").read_text().splitlines()]
    val = (run_dir / "data" / "val.jsonl").read_text().splitlines()
    assert len(train) == 36 and len(val) == 8
    assert train[0] == {"prompt": "0+0=", "ground_truth": "0", "data_source": "demo/arith", "ability": "math",
                        "extra_info": {"split": "train", "index": 0}, "reference": None}
    launch = json.loads((run_dir / "attempts" / "1" / "launch.json").read_text())
    assert launch["argv"][1:] == ["-m", "training.local.train", "--run-dir", str(run_dir)]
    assert launch["env"]["VERL_FILE_LOGGER_PATH"] == str(run_dir / "attempts" / "1" / "metrics.jsonl")
    attempt = job.attempts.get()
    assert attempt.state == JobState.RUNNING and attempt.supervisor_pid == 424242
    assert RunEvent.objects.filter(job=job, kind="state", data__state="running").count() == 1


def test_backend_refusal_fails_the_job_with_its_message(project, engineer, prompts_version, tiny_model, reward_spec,
                                                        no_enqueue, fake_supervisor, monkeypatch):
    from training.backends import BackendError

    job = _create(project, engineer, prompts_version, tiny_model, reward_spec)

    def refuse(self, run_dir, attempt):
        raise BackendError("needs 8 GPUs")

    monkeypatch.setattr("training.backends.local.LocalBackend.prepare", refuse)
    job_launch(job.pk)
    job.refresh_from_db()
    assert job.state == JobState.FAILED and "needs 8 GPUs" in job.error
    assert fake_supervisor == []


def test_cancel_queued_job_is_immediate(project, engineer, prompts_version, tiny_model, reward_spec, no_enqueue,
                                        fake_supervisor):
    job = _create(project, engineer, prompts_version, tiny_model, reward_spec)
    job_cancel(job=job, user=engineer)
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED and job.cancel_requested
    assert job_launch(job.pk) == "skipped" and fake_supervisor == []
    with pytest.raises(ApplicationError, match="already cancelled"):
        job_cancel(job=job, user=engineer)


def test_cancel_running_job_asks_the_supervisor(project, engineer, prompts_version, tiny_model, reward_spec,
                                                no_enqueue, fake_supervisor):
    job = _create(project, engineer, prompts_version, tiny_model, reward_spec)
    job_launch(job.pk)
    job.refresh_from_db()
    job_cancel(job=job, user=engineer)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.cancel_requested  # cancelled once exit.json appears
    assert (Path(job.run_dir) / "attempts" / "1" / "CANCEL").exists()


def _checkpoint(job, step):
    path = Path(job.run_dir) / "checkpoints" / f"global_step_{step}"
    path.mkdir(parents=True)
    return Checkpoint.objects.create(job=job, step=step, path=str(path))


def test_resume_makes_a_new_attempt_in_the_same_run_dir(project, engineer, prompts_version, tiny_model, reward_spec,
                                                        no_enqueue, fake_supervisor,
                                                        django_capture_on_commit_callbacks):
    job = _create(project, engineer, prompts_version, tiny_model, reward_spec)
    job_launch(job.pk)
    job.refresh_from_db()
    Job.objects.filter(pk=job.pk).update(state=JobState.LOST)  # as sync does when the heartbeat stops
    JobAttempt.objects.filter(job=job).update(state=JobState.LOST)
    job.refresh_from_db()
    with pytest.raises(ApplicationError, match="no checkpoint"):
        job_resume(job=job, user=engineer)
    _checkpoint(job, 5)
    ck10 = _checkpoint(job, 10)
    with django_capture_on_commit_callbacks(execute=True):
        attempt = job_resume(job=job, user=engineer, hp_overrides={"lr": 5e-4})
    assert attempt.number == 2 and attempt.resume_from == ck10.path and attempt.reason == "resume"
    job.refresh_from_db()
    assert job.state == JobState.QUEUED and job.config["hp"]["lr"] == 5e-4
    assert no_enqueue[-1][0] == job.pk
    assert job_launch(job.pk) == "launched"
    spec = json.loads((Path(job.run_dir) / "job.json").read_text())
    assert spec["resume_from"] == ck10.path and spec["hp"]["lr"] == 5e-4
    job.refresh_from_db()
    assert job.attempt_count == 2 and job.last_step == 10
    assert (Path(job.run_dir) / "attempts" / "2" / "launch.json").exists()


def test_rollback_creates_a_child_job_with_its_own_run_dir(project, engineer, prompts_version, tiny_model,
                                                           reward_spec, no_enqueue, fake_supervisor):
    parent = _create(project, engineer, prompts_version, tiny_model, reward_spec)
    job_launch(parent.pk)
    parent.refresh_from_db()
    ck = _checkpoint(parent, 5)
    _checkpoint(parent, 10)
    child = job_create_child(parent=parent, checkpoint=ck, user=engineer, hp_overrides={"kl_coef": 0.04})
    assert child.parent == parent and child.resume_checkpoint == ck
    assert child.data_manifest == parent.data_manifest
    assert list(child.reward_versions.all()) == list(parent.reward_versions.all())
    assert child.config["hp"]["kl_coef"] == 0.04 and child.config["hp"]["max_steps"] == 10
    assert JobAttempt.objects.get(job=child).reason == "rollback"
    job_launch(child.pk)
    child.refresh_from_db()
    assert child.run_dir != parent.run_dir
    assert json.loads((Path(child.run_dir) / "job.json").read_text())["resume_from"] == ck.path
    assert parent.checkpoints.count() == 2  # the parent's branch stays
    assert RunEvent.objects.filter(job=parent, kind="rollback").exists()


def test_a_rollback_child_of_a_legacy_verl_job_keeps_the_legacy_trainer(project, engineer, prompts_version, tiny_model,
                                                                        reward_spec, no_enqueue, fake_supervisor):
    """VERL's trainer (V1 or legacy) is the parent's: a rollback resumes a checkpoint with the trainer that wrote it."""
    parent = _create(project, engineer, prompts_version, tiny_model, reward_spec, backend="verl",
                     hp_overrides={"max_steps": 10, "verl.use_v1": False})
    assert parent.config["verl"]["use_v1"] is False
    job_launch(parent.pk)
    parent.refresh_from_db()
    child = job_create_child(parent=parent, checkpoint=_checkpoint(parent, 5), user=engineer,
                             hp_overrides={"max_steps": 12})
    assert child.config["verl"]["use_v1"] is False and child.config["hp"]["max_steps"] == 12
    assert job_launch(child.pk) == "launched"
    child.refresh_from_db()
    assert json.loads((Path(child.run_dir) / "job.json").read_text())["verl"]["use_v1"] is False


def test_restore_on_a_running_job_waits_for_the_old_attempt(project, engineer, prompts_version, tiny_model,
                                                           reward_spec, no_enqueue, fake_supervisor):
    """The KL guard's restore: stop the running attempt, start the next one only once the old one has exited."""
    import time as _time

    from webapp.runs.services import sync_job

    job = _create(project, engineer, prompts_version, tiny_model, reward_spec)
    job_launch(job.pk)
    job.refresh_from_db()
    a1 = Path(job.run_dir) / "attempts" / "1"
    (a1 / "heartbeat").write_text(json.dumps({"time": _time.time(), "pid": 1}))
    ck = _checkpoint(job, 5)
    attempt = job_resume(job=job, user=engineer, reason="guard_rule", checkpoint=ck, hp_overrides={"lr": 5e-4})
    assert attempt.number == 2 and attempt.reason == "guard_rule"
    assert (a1 / "CANCEL").exists()
    assert job_launch(job.pk) == "deferred"  # attempt 1 is still alive
    assert no_enqueue[-1] == (job.pk, "cpu", 2) and len(fake_supervisor) == 1
    (a1 / "exit.json").write_text(json.dumps({"returncode": -15, "cancelled": True, "ended_at": _time.time()}))
    sync_job(job)
    job.refresh_from_db()
    assert job.state == JobState.QUEUED  # the old attempt ended as cancelled, the job waits for attempt 2
    assert job.attempts.get(number=1).state == JobState.CANCELLED
    assert job_launch(job.pk) == "launched"
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.attempt_count == 2 and len(fake_supervisor) == 2
