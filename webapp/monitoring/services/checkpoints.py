"""Checkpoint actions: promote, roll back, and retention (which never deletes a used one); export: export.py."""
from __future__ import annotations

import json
import logging
import math
import os
import shutil
from pathlib import Path
from typing import Any

from django.db import transaction
from django.utils import timezone

from training.rundir import RunDir, write_atomic
from webapp.core.audit import audit
from webapp.core.models import AuditLog, Project
from webapp.core.services import ApplicationError
from webapp.monitoring.services.guard import restore_target
from webapp.runs.models import (
    ACTIVE_STATES,
    FINAL_STATES,
    Checkpoint,
    CheckpointStatus,
    Job,
    JobAttempt,
    JobState,
    RunEvent,
)
from webapp.runs.selectors import available_checkpoints, checkpoint_on_disk
from webapp.runs.services import launch

logger = logging.getLogger(__name__)

# Hyperparameters a rollback may change (and how to describe a bad value).
HP_EDITABLE = {"lr": "learning rate", "kl_coef": "KL coefficient"}
PROTECTED_FILE = "protected.json"


def parse_hp_overrides(raw: Any) -> dict[str, float]:
    """Validate rollback edits: {"lr": 5e-7} or ["lr=5e-7", "kl_coef=0.04"] -> {name: positive float}."""
    if raw in (None, "", [], {}):
        return {}
    if isinstance(raw, (list, tuple)):
        pairs: dict[str, Any] = {}
        for item in raw:
            key, sep, value = str(item).partition("=")
            if not sep:
                raise ApplicationError(f"'{item}' is not NAME=VALUE (e.g. lr=5e-7).", field="hp_overrides")
            pairs[key.strip()] = value.strip()
        raw = pairs
    if not isinstance(raw, dict):
        raise ApplicationError("hp_overrides must be an object like {\"lr\": 5e-7}.", field="hp_overrides")
    out: dict[str, float] = {}
    for key, value in raw.items():
        if value in (None, ""):
            continue
        if key not in HP_EDITABLE:
            raise ApplicationError(f"'{key}' cannot be changed on rollback; allowed: {', '.join(HP_EDITABLE)}.",
                                   field="hp_overrides")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ApplicationError(f"The {HP_EDITABLE[key]} must be a number, got '{value}'.",
                                   field="hp_overrides") from None
        if not math.isfinite(number) or number < 0 or (key == "lr" and number == 0):
            raise ApplicationError(f"The {HP_EDITABLE[key]} must be a positive number, got {value}.",
                                   field="hp_overrides")
        out[key] = number
    return out


def checkpoint_get(*, job: Job, step: Any) -> Checkpoint:
    """The job's checkpoint at `step`, still on disk; a clear error otherwise."""
    try:
        step = int(step)
    except (TypeError, ValueError):
        raise ApplicationError(f"The step must be a whole number, got '{step}'.", field="step") from None
    ckpt = Checkpoint.objects.filter(job=job, step=step).first()
    if ckpt is not None and checkpoint_on_disk(ckpt):
        return ckpt
    listing = f"(available: {', '.join(str(c.step) for c in available_checkpoints(job)) or 'none yet'})"
    if ckpt is None:
        raise ApplicationError(f"Run #{job.pk} has no checkpoint at step {step} {listing}.", field="step")
    if ckpt.status != CheckpointStatus.AVAILABLE:
        raise ApplicationError(f"The checkpoint at step {step} is {ckpt.get_status_display().lower()} {listing}.",
                               field="step")
    raise ApplicationError(f"The checkpoint folder for step {step} is missing on disk: retention may have removed "
                           f"it since the run was last read {listing}.", field="step")


def _describe(ckpt: Checkpoint | None) -> dict[str, Any] | None:
    return None if ckpt is None else {"checkpoint": ckpt.pk, "job": ckpt.job_id, "step": ckpt.step}


@transaction.atomic
def checkpoint_promote(*, checkpoint: Checkpoint, user) -> Checkpoint:
    """Make the checkpoint the project's active policy: the alias moves, nothing is deleted."""
    job = checkpoint.job
    if checkpoint.status != CheckpointStatus.AVAILABLE:
        raise ApplicationError(f"The checkpoint at step {checkpoint.step} is "
                               f"{checkpoint.get_status_display().lower()} and cannot be promoted.")
    project = Project.objects.select_for_update().get(pk=job.project_id)
    previous = project.active_checkpoint
    if previous is not None and previous.pk == checkpoint.pk:
        raise ApplicationError(f"Step {checkpoint.step} of run #{job.pk} is already the active policy.")
    project.active_checkpoint = checkpoint
    project.save(update_fields=["active_checkpoint", "updated_at"])
    checkpoint.promoted = True
    checkpoint.save(update_fields=["promoted", "updated_at"])
    prev_text = f"run #{previous.job_id} step {previous.step}" if previous else "none"
    RunEvent.objects.create(job=job, kind="promote", step=checkpoint.step, actor=user,
                            message=f"Step {checkpoint.step} promoted to the project's active policy "
                                    f"(was {prev_text})",
                            data={"checkpoint": checkpoint.pk, "previous": _describe(previous)})
    audit(actor=user, action="checkpoint.promote", project=project, obj=checkpoint,
          summary=f"Promoted run #{job.pk} step {checkpoint.step} (was {prev_text})",
          before={"active_checkpoint": _describe(previous)}, after={"active_checkpoint": _describe(checkpoint)})
    transaction.on_commit(lambda: write_protected(job))
    return checkpoint


@transaction.atomic
def job_rollback(*, job: Job, step: Any, user, reason: str = "", hp_overrides: Any = None,
                 stop_parent: bool = False) -> Job:
    """Start a child run from the checkpoint at `step` (same config, optional lr / kl_coef edits).

    The parent and its later checkpoints stay. When the project's active policy is one of this
    run's checkpoints, the alias returns to the chosen one. Audited with who, from/to step and why.
    """
    from webapp.monitoring.selectors import job_hp

    hp = parse_hp_overrides(hp_overrides)
    stop_parent = stop_parent and not job.is_attached  # the app cannot stop a process it does not own
    reason = (reason or "").strip()
    if len(reason) > 400:
        raise ApplicationError("Keep the reason under 400 characters.", field="reason")
    # Rollbacks of one run take turns: this write holds the parent's row lock (PostgreSQL) or the
    # database's write lock (SQLite) until commit, so the second of two identical requests finds
    # the first one's child. It comes before any read so that SQLite never upgrades a read snapshot.
    Job.objects.filter(pk=job.pk).update(updated_at=timezone.now())
    ckpt = checkpoint_get(job=job, step=step)
    same = _same_rollback(job, ckpt, hp)
    if same is not None:
        if stop_parent and job.state in ACTIVE_STATES:
            launch.job_cancel(job=job, user=user)
        return same
    from_step = job.last_step
    child = launch.job_create_child(parent=job, checkpoint=ckpt, user=user, hp_overrides=hp or None,
                                         reason="rollback")
    if stop_parent and job.state in ACTIVE_STATES:
        launch.job_cancel(job=job, user=user)
    project = Project.objects.select_for_update().get(pk=job.project_id)
    alias_moved = None
    if project.active_checkpoint is not None and project.active_checkpoint.job_id == job.pk \
            and project.active_checkpoint.pk != ckpt.pk:
        alias_moved = _describe(project.active_checkpoint)
        project.active_checkpoint = ckpt
        project.save(update_fields=["active_checkpoint", "updated_at"])
    old_hp = {k: job_hp(job).get(k) for k in hp}
    why = f": {reason}" if reason else ""
    data = {"child_job": child.pk, "from_step": from_step, "to_step": ckpt.step, "checkpoint": ckpt.pk,
            "reason": reason, "overrides": hp, "hp_before": old_hp, "alias_moved_from": alias_moved}
    summary = f"Rolled back run #{job.pk} from step {from_step} to step {ckpt.step} → run #{child.pk}{why}"
    before = {"job": job.pk, "step": from_step, "hp": old_hp, "active_checkpoint": alias_moved}
    after = {"job": child.pk, "parent": job.pk, "step": ckpt.step, "checkpoint": ckpt.pk, "overrides": hp,
             "reason": reason, "active_checkpoint": _describe(ckpt) if alias_moved else None}
    # job_create_child already wrote the parent's "rollback" event and the audit entry of this action:
    # complete them (who, from which step to which, why) rather than logging the action twice.
    event = RunEvent.objects.filter(job=job, kind="rollback", data__child_job=child.pk).order_by("-id").first()
    message = f"Rolled back to step {ckpt.step} as run #{child.pk}{why}"[:500]
    if event is None:
        RunEvent.objects.create(job=job, kind="rollback", step=ckpt.step, actor=user, data=data, message=message)
    else:
        event.message, event.data, event.step = message, {**event.data, **data}, ckpt.step
        event.save(update_fields=["message", "data", "step", "updated_at"])
    RunEvent.objects.create(job=child, kind="rollback", step=ckpt.step, actor=user, data=data,
                            message=f"Branched from run #{job.pk} at step {ckpt.step}{why}"[:500])
    entry = AuditLog.objects.filter(project=project, action="job.rollback", object_id=str(child.pk)) \
        .order_by("-id").first()
    if entry is None:
        audit(actor=user, action="job.rollback", project=project, obj=child, summary=summary, before=before,
              after=after)
    else:
        entry.summary, entry.before, entry.after = summary[:500], before, {**(entry.after or {}), **after}
        entry.save(update_fields=["summary", "before", "after"])
    transaction.on_commit(lambda: write_protected(job))
    return child


def _same_rollback(job: Job, ckpt: Checkpoint, hp: dict[str, float]) -> Job | None:
    """A child of `job` from `ckpt` with the same editable settings, unless it failed or was cancelled.

    Repeating a rollback (a double click, two tabs) returns that child; after a failed branch a new
    one starts.
    """
    from webapp.monitoring.selectors import job_hp

    parent_hp = job_hp(job)
    wanted = {k: hp.get(k, parent_hp.get(k)) for k in HP_EDITABLE}
    children = Job.objects.filter(parent=job, resume_checkpoint=ckpt, attempts__reason="rollback") \
        .exclude(state__in=[JobState.FAILED, JobState.CANCELLED]).distinct().order_by("pk")
    for child in children:
        if all(job_hp(child).get(k) == v for k, v in wanted.items()):
            return child
    return None


def protected_steps(job: Job) -> set[int]:
    """Steps of this run that must never be deleted: promoted, the project alias, resumed by a run, in use."""
    from webapp.monitoring.models import EvaluationStatus

    ckpts = Checkpoint.objects.filter(job=job)
    steps = set(ckpts.filter(promoted=True).values_list("step", flat=True))
    active = Project.objects.filter(pk=job.project_id).values_list("active_checkpoint_id", flat=True).first()
    if active:
        steps |= set(ckpts.filter(pk=active).values_list("step", flat=True))
    steps |= set(ckpts.filter(resumed_jobs__isnull=False).values_list("step", flat=True))
    steps |= set(ckpts.filter(evaluations__status__in=[EvaluationStatus.QUEUED, EvaluationStatus.RUNNING])
                 .values_list("step", flat=True))
    steps |= restore_target(job)  # where the run guard would go back to: the trainer must not delete it
    steps |= _human_eval_steps(job)
    if job.run_dir:  # a live attempt (a resume or a guard's restore) reading one of our folders
        prefix = str(RunDir(job.run_dir).checkpoints) + os.sep
        for path in JobAttempt.objects.filter(resume_from__startswith=prefix, job__state__in=ACTIVE_STATES) \
                .values_list("resume_from", flat=True):
            name = Path(path).name
            if name.startswith("global_step_") and name[12:].isdigit():
                steps.add(int(name[12:]))
    return steps


def _human_eval_steps(job: Job) -> set[int]:
    """Both sides of a scheduled human evaluation still being generated, and, while the run goes on, the last
    evaluated checkpoint: the next scheduled evaluation compares with it."""
    from webapp.monitoring.models import BlindSource, BlindTask, EvaluationStatus
    from webapp.monitoring.services.gap import schedule_of

    tasks = BlindTask.objects.filter(b_checkpoint__job=job, source=BlindSource.PERIODIC)
    steps: set[int] = set()
    for task in tasks.filter(status__in=[EvaluationStatus.QUEUED, EvaluationStatus.RUNNING]).select_related(
            "b_checkpoint"):
        steps |= {task.b_checkpoint.step} | ({task.opponent_step} if task.opponent_step else set())
    sched = schedule_of(job)
    if sched and sched.get("against") != "base" and job.state in ACTIVE_STATES:
        last = tasks.order_by("-b_checkpoint__step").values_list("b_checkpoint__step", flat=True).first()
        if last is not None:
            steps.add(last)
    return steps


def write_protected(job: Job) -> set[int]:
    """Write <run_dir>/checkpoints/protected.json so the training process never deletes those steps."""
    steps = protected_steps(job)
    if not job.run_dir or not Path(job.run_dir).is_dir():
        return steps
    path = RunDir(job.run_dir).checkpoints / PROTECTED_FILE
    text = json.dumps(sorted(steps))
    try:
        if path.read_text() == text:
            return steps
    except OSError:
        pass
    write_atomic(path, text)
    return steps


def keep_last_k(job: Job) -> int | None:
    from webapp.monitoring.selectors import job_hp

    value = job_hp(job).get("keep_last_k")
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True


def retention_apply(*, job: Job) -> list[int]:
    """For a finished run: delete all but the last k checkpoints, never a protected one."""
    from training.checkpoints import plan_retention

    if job.state not in FINAL_STATES or not job.run_dir:
        return []
    protected = write_protected(job)
    available = list(Checkpoint.objects.filter(job=job, status=CheckpointStatus.AVAILABLE))
    doomed = set(plan_retention([c.step for c in available], keep_last_k(job), protected))
    root = RunDir(job.run_dir).checkpoints
    deleted, ids = [], []
    try:
        for ckpt in sorted((c for c in available if c.step in doomed), key=lambda c: c.step):
            folder = Path(ckpt.path)
            if not (folder.name == f"global_step_{ckpt.step}" and _inside(folder, root)):
                logger.warning("retention: refusing to delete %s (outside %s)", folder, root)
                continue
            shutil.rmtree(folder, ignore_errors=True)
            deleted.append(ckpt.step)
            ids.append(ckpt.pk)
    finally:  # one statement for the whole sweep (a long run has hundreds), even when a deletion fails midway
        Checkpoint.objects.filter(pk__in=ids).update(status=CheckpointStatus.DELETED, updated_at=timezone.now())
    if deleted:
        msg = f"Retention deleted steps {', '.join(map(str, deleted))} (keep last {keep_last_k(job)}; " \
              f"protected: {', '.join(map(str, sorted(protected))) or 'none'})"
        RunEvent.objects.create(job=job, kind="retention", message=msg[:500], data={"deleted": deleted,
                                "protected": sorted(protected), "keep_last_k": keep_last_k(job)})
        audit(actor=None, action="checkpoint.retention", project=job.project, obj=job, summary=msg,
              after={"deleted": deleted})
    return deleted


def _is_lora(folder: Path) -> bool:
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
        if "lora" in manifest:
            return bool(manifest["lora"])
    except (OSError, ValueError):
        pass
    return (folder / "model" / "adapter_config.json").exists() or (folder / "actor" / "lora_adapter").is_dir()


def checkpoint_is_lora(checkpoint: Checkpoint) -> bool:
    return _is_lora(Path(checkpoint.path))
