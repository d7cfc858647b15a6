"""Attached runs: a VERL (or TRL) run written by a job the app did not launch, followed read-only.

The app claims its own run directory for the attached run, as for any job, and never writes into the external
folder: attempt 1's `metrics.jsonl` is a link to VERL's file-logger JSONL (re-checked at every sync to lead
inside the folder), each step's rollout and validation dump is copied into the app's `samples/` once complete
(TRL's parquet tables converted to rollout-store rows), and checkpoints are listed where they are. The usual sync
then ingests curves and derived series, and the job_synced hooks run the health rules — every one of them a
warning (notification) on an attached run, since the app does not own the process — and stall detection (notify).
A rollback from one of its checkpoints starts an app-owned child run with the model, data and reward chosen at
attach time. External folders must lie in `<ATTACH_ROOTS entry>/<project slug>/`: one project never attaches
another's runs, nor the app's own data.
"""
from __future__ import annotations

import logging
import os
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from training import external, rollouts
from training.guard_rules import BUILTIN
from training.presets import DEFAULT_PRESET
from training.rundir import RunDir, claim_run_dir, write_atomic, write_jsonl
from webapp.core.audit import audit
from webapp.core.models import Project
from webapp.core.services import ApplicationError
from webapp.datasets.models import DatasetVersion
from webapp.registry.models import ModelEntry
from webapp.rewards.models import RewardVersion
from webapp.runs.models import Checkpoint, CheckpointStatus, Job, JobAttempt, JobState, MetricPoint, RunEvent
from webapp.runs.services.plan import plan_job

log = logging.getLogger(__name__)
SETTLE_S = 3.0  # a dump older than this is complete (VERL writes each from a background thread)
# Every built-in rule, acting by notification only.
WARN_RULES = [{"rule": name, "action": "warn"} for name in BUILTIN]


# -- where from ----------------------------------------------------------------------------------

def _under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def confine_attach_dir(path: str, project: Project) -> Path:
    """The resolved folder behind `path` when it lies in `<an ATTACH_ROOTS entry>/<project slug>/` and in none of
    the app's data folders. The refusal is the same whether the folder exists or not."""
    roots = [Path(r) / project.slug for r in getattr(settings, "ATTACH_ROOTS", [])]
    if not roots:
        raise ApplicationError("No folder is approved for attaching runs: the operator sets ATTACH_ROOTS.",
                               field="path")
    refused = ApplicationError(f"{path} is not in this project's approved folders for external runs "
                               f"({', '.join(str(r) for r in roots)}).", field="path")
    p = Path(str(path)).expanduser()
    if not p.is_absolute():
        raise ApplicationError("Give the absolute path of the run's folder.", field="path")
    try:
        resolved = p.resolve()
    except (OSError, RuntimeError):
        raise refused from None
    if not any(_under(resolved, r.resolve()) for r in roots):
        raise refused
    for data in (settings.RUNS_ROOT, settings.MEDIA_ROOT, settings.VAR_DIR):
        if _under(resolved, Path(data).resolve()):
            raise refused
    if not resolved.is_dir():
        raise refused
    return resolved


def _inside(path: Path, root: Path) -> Path | None:
    """`path` resolved when it stays inside `root` (links included), else None."""
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError):
        return None
    return resolved if _under(resolved, root) else None


# -- attaching -----------------------------------------------------------------------------------

def attach_run(*, project: Project, user, path: str, name: str = "", base_model: ModelEntry | None = None,
               dataset_version: DatasetVersion | None = None, reward_version: RewardVersion | None = None,
               preset: str = "") -> Job:
    """Create a read-only run that follows the folder at `path`, and sync it once.

    `base_model`, `dataset_version` and `reward_version` (with the backend's preset) are what a rollback child
    trains with; without them the run is followed but cannot be rolled back."""
    root = confine_attach_dir(path, project)
    try:
        layout = external.detect(root)
    except external.LayoutError as exc:
        raise ApplicationError(str(exc), field="path") from None
    backend = "verl" if layout.format == "verl" else "local"
    preset = preset or DEFAULT_PRESET
    rollback = None
    if base_model or dataset_version or reward_version:
        if not (base_model and dataset_version and reward_version):
            raise ApplicationError("To roll this run back, choose its base model, its prompt data and its reward "
                                   "(or none of them to only follow it).", field="base_model")
        plan = plan_job(project=project, kind="grpo", backend=backend, preset=preset,
                        hp_overrides=None, dataset_version=dataset_version, base_model=base_model,
                        reward_spec={"shaping": "raw", "components": [
                            {"type": "function", "version_id": reward_version.pk, "weight": 1.0}]},
                        include_unreviewed=True, check_probes=False)
        if plan.errors:
            raise ApplicationError("; ".join(f"{k}: {v}" for k, v in plan.errors.items()), field="base_model")
        rollback = {**plan.config, "include_unreviewed": True}
    config = {"hp": {**((rollback or {}).get("hp") or {})}, "guard_rules": WARN_RULES,
              "stall": {"action": "notify"}, "rollback_config": rollback}
    with transaction.atomic():
        job = Job.objects.create(
            project=project, kind="grpo", backend=backend, state=JobState.RUNNING, preset=preset, config=config,
            name=(name or "").strip()[:200] or f"attached · {root.name}", base_model=base_model,
            dataset_version=dataset_version, reward_spec=(rollback and plan.reward_spec) or {},
            attached_dir=str(root), attached={"layout": layout.to_dict(), "copied": {}},
            queue="cpu", created_by=user, started_at=timezone.now(), attempt_count=1)
        if reward_version is not None:
            job.reward_versions.set([reward_version])
        run = claim_run_dir(project.runs_root, str(job.pk))
        Job.objects.filter(pk=job.pk).update(run_dir=str(run.path))
        job.run_dir = str(run.path)
        JobAttempt.objects.create(job=job, number=1, reason="attach", state=JobState.RUNNING)
        adir = run.attempt(1).create()
        if layout.metrics:
            os.symlink(root / layout.metrics, adir.metrics)
        RunEvent.objects.create(job=job, kind="attached", actor=user if getattr(user, "is_authenticated", False)
                                else None, message=f"attached (read-only): following {root}"[:500],
                                data={"path": str(root), "found": layout.found})
        audit(actor=user, action="job.attach", project=project, obj=job, summary=f"Attached {root} as run #{job.pk}",
              after={"path": str(root), "layout": layout.to_dict(), "rollback": bool(rollback)})
    sync_attached(job)
    job.refresh_from_db()
    return job


def stop_following(*, job: Job, user) -> Job:
    """The attached run is done (or no longer interesting): it keeps what it has and is no longer synced."""
    if not job.is_attached:
        raise ApplicationError("Only an attached run can stop being followed.")
    _finish(job, "stopped following on request", user)
    job.refresh_from_db()
    return job


def _finish(job: Job, why: str, user=None) -> None:
    now = timezone.now()
    if Job.objects.filter(pk=job.pk, state=JobState.RUNNING).update(state=JobState.SUCCEEDED, finished_at=now,
                                                                    updated_at=now):
        JobAttempt.objects.filter(job=job, number=1).update(state=JobState.SUCCEEDED, ended_at=now)
        RunEvent.objects.create(job=job, kind="state", step=job.last_step or None, message=why[:500],
                                data={"state": JobState.SUCCEEDED},
                                actor=user if getattr(user, "is_authenticated", False) else None)
        audit(actor=user, action="job.attach_stop", project=job.project, obj=job, summary=f"Run #{job.pk}: {why}")


# -- following -----------------------------------------------------------------------------------

def sync_attached(job: Job) -> list[MetricPoint]:
    """One pass over an attached run: new dumps copied, metrics ingested, checkpoints listed; then job_synced."""
    from webapp.runs.services.sync import _after_sync, ingest_attempt_metrics

    with transaction.atomic():
        job = Job.objects.select_for_update(skip_locked=True).filter(pk=job.pk).first()
        if job is None or job.state != JobState.RUNNING:
            return []
        root, layout = Path(job.attached_dir), (job.attached or {}).get("layout") or {}
        if not root.is_dir() or root.resolve() != root:
            _finish(job, f"stopped following: {root} is gone or moved")
            return []
        newest = _copy_dumps(job, root, layout)
        attempt = job.attempts.get(number=1)
        if layout.get("format") == "trl":
            _trl_metrics(job, root, layout)
        else:
            link = RunDir(job.run_dir).attempt(1).metrics
            if layout.get("metrics") and _inside(link, root) is None:
                _finish(job, "stopped following: its metrics file now leads out of the attached folder")
                return []
            newest = max(newest, _mtime(link))
        points = ingest_attempt_metrics(job, attempt)
        newest = max(newest, _sync_checkpoints(job, root, layout))
        fields: dict[str, Any] = {"attached": job.attached}
        if points:
            fields["last_step"] = job.last_step = max([job.last_step, *(p.step for p in points)])
        if newest:
            fields["heartbeat_at"] = job.heartbeat_at = datetime.fromtimestamp(newest, UTC)
        Job.objects.filter(pk=job.pk).update(**fields)
        if newest and time.time() - newest > settings.ATTACH_IDLE_S:
            _finish(job, f"stopped following: nothing changed for {settings.ATTACH_IDLE_S / 3600:g} h")
    _after_sync(job, points)
    return points


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _copy_dumps(job: Job, root: Path, layout: dict) -> float:
    """Copy each complete, changed dump into the app's samples/ (converted from TRL's tables); newest mtime."""
    copied: dict[str, list] = job.attached.setdefault("copied", {})
    run, newest, now = RunDir(job.run_dir), 0.0, time.time()
    sources = [("rollout", layout.get("rollout"), "*.jsonl"), ("val", layout.get("val"), "*.jsonl"),
               ("rollout", layout.get("completions"), "completions_*.parquet")]
    for kind, folder, pattern in sources:
        if not folder or _inside(root / folder, root) is None:
            continue
        for src in (root / folder).glob(pattern):
            step = int(external.TRL_TABLE.match(src.name).group(1)) if src.suffix == ".parquet" else \
                (int(src.stem) if src.stem.isdigit() else None)
            real = _inside(src, root)
            if step is None or real is None or not real.is_file():
                continue
            st = real.stat()
            newest = max(newest, st.st_mtime)
            key, seen = f"{kind}/{step}", [st.st_size, st.st_mtime_ns]
            if copied.get(key) == seen or now - st.st_mtime < SETTLE_S:
                continue  # copied already (and maybe pruned since), or still being written
            target = run.samples(kind, step)
            if src.suffix == ".parquet":
                write_jsonl(target, external.trl_rows(real, step))
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                tmp = target.with_name(f".tmp-{target.name}")
                shutil.copyfile(real, tmp)
                os.replace(tmp, target)
            copied[key] = seen
    return newest


def _trl_metrics(job: Job, root: Path, layout: dict) -> None:
    """attempt 1's metrics.jsonl from TRL's trainer_state.json and the completion tables' steps (rewritten whole:
    the sync's reader starts over when a file's head changes, and upserts)."""
    import json

    by_step = external.trl_metrics(root, layout.get("checkpoints") or ".") if layout.get("checkpoints") else {}
    for step in rollouts.steps(job.run_dir):
        by_step.setdefault(step, {})
    lines = "".join(json.dumps({"step": s, "data": d}) + "\n" for s, d in sorted(by_step.items()))
    path = RunDir(job.run_dir).attempt(1).metrics
    try:
        if path.read_text() == lines:
            return
    except OSError:
        pass
    write_atomic(path, lines)


def _sync_checkpoints(job: Job, root: Path, layout: dict) -> float:
    """Checkpoint rows for the external global_step_N folders (where they are); the newest save's time."""
    from training.ingest import describe_checkpoint, latest_checkpointed_step

    folder = layout.get("checkpoints")
    if layout.get("format") != "verl" or not folder or _inside(root / folder, root) is None:
        return 0.0
    ckpt_root = (root / folder).resolve()
    latest = latest_checkpointed_step(ckpt_root)
    existing = {c.step: c for c in job.checkpoints.all()}
    newest, on_disk = 0.0, set()
    for entry in sorted(ckpt_root.iterdir()) if ckpt_root.is_dir() else []:
        info = describe_checkpoint(entry, latest, with_size=False)
        if info is None or not info.complete or _inside(entry, root) is None:
            continue
        on_disk.add(info.step)
        newest = max(newest, _mtime(entry))
        if info.step in existing:
            continue
        metrics = dict(job.metric_points.filter(step=info.step).values_list("name", "value"))
        ckpt = Checkpoint.objects.create(job=job, step=info.step, path=str(entry.resolve()), metrics=metrics)
        RunEvent.objects.create(job=job, kind="checkpoint", step=info.step, message=f"checkpoint at step {info.step}",
                                data={"checkpoint": ckpt.pk})
    for step, ckpt in existing.items():
        if step not in on_disk and ckpt.status == CheckpointStatus.AVAILABLE:
            ckpt.status = CheckpointStatus.MISSING
            ckpt.save(update_fields=["status", "updated_at"])
    return newest
