"""Run the KL guard (training.kl_guard) on newly ingested points and act on its decisions."""
from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from django.db import transaction

from training.kl_guard import RESTORE, Decision, GuardConfig, GuardConfigError, GuardState, KLGuard
from webapp.core.audit import audit
from webapp.core.services import ApplicationError
from webapp.monitoring.models import KLGuardRecord
from webapp.notifications.services import notify
from webapp.runs.models import ACTIVE_STATES, Checkpoint, CheckpointStatus, Job, MetricPoint, RunEvent
from webapp.runs.services import launch

logger = logging.getLogger(__name__)


def guard_config(job: Job) -> GuardConfig | None:
    """The job's guard config, or None when it has none, it is off, or it is invalid (logged)."""
    raw = (job.config or {}).get("kl_guard")
    if not isinstance(raw, dict):
        return None
    try:
        cfg = GuardConfig.from_dict(raw)
    except GuardConfigError as exc:
        logger.warning("job %s: KL guard disabled: %s", job.pk, exc)
        return None
    return cfg if cfg.enabled else None


def checkpoint_candidates(job: Job, metric: str) -> dict[int, tuple[Checkpoint, float | None]]:
    """{step: (checkpoint, KL logged at that step)} for the run's checkpoints and the one it resumed from."""
    ckpts = list(Checkpoint.objects.filter(job=job, status=CheckpointStatus.AVAILABLE))
    if job.resume_checkpoint_id:
        parent_ckpt = Checkpoint.objects.filter(pk=job.resume_checkpoint_id,
                                                status=CheckpointStatus.AVAILABLE).first()
        if parent_ckpt is not None and all(c.step != parent_ckpt.step for c in ckpts):
            ckpts.append(parent_ckpt)
    out: dict[int, tuple[Checkpoint, float | None]] = {}
    for c in ckpts:
        kl = MetricPoint.objects.filter(job_id=c.job_id, name=metric, step=c.step).values_list(
            "value", flat=True).first()
        if kl is None:
            kl = (c.metrics or {}).get(metric)
        out[c.step] = (c, float(kl) if isinstance(kl, (int, float)) else None)
    return out


def kl_guard_process(*, job: Job, new_points: Iterable[tuple[int, str, Any]]) -> list[Decision]:
    """Feed the new KL points of an active job to its guard; stop or restore the run when it trips."""
    from webapp.monitoring.selectors import job_hp

    cfg = guard_config(job)
    if cfg is None or job.state not in ACTIVE_STATES:
        return []
    points = sorted(((int(s), v) for s, n, v in new_points if n == cfg.metric), key=lambda p: p[0])
    if not points:
        return []
    candidates = checkpoint_candidates(job, cfg.metric)
    with transaction.atomic():
        record, _ = KLGuardRecord.objects.select_for_update().get_or_create(job=job)
        guard = KLGuard(cfg, GuardState.from_dict(record.state))
        decisions = guard.feed(points, {s: kl for s, (_c, kl) in candidates.items()}, job_hp(job))
        record.state = guard.state.to_dict()
        record.trips += len(decisions)
        record.save()
    for decision in decisions:
        _act(job, cfg, decision, candidates)
    return decisions


def _act(job: Job, cfg: GuardConfig, d: Decision, candidates: dict[int, tuple[Checkpoint, float | None]]) -> None:
    from webapp.monitoring.selectors import job_hp

    target = candidates[d.to_step][0] if d.action == RESTORE and d.to_step is not None else None
    data = {**d.to_dict(), "metric": cfg.metric, "threshold": cfg.threshold, "patience": cfg.patience,
            "checkpoint": target.pk if target else None, "checkpoint_job": target.job_id if target else None}
    RunEvent.objects.create(job=job, kind="kl_guard", step=d.step, message=d.reason[:500], data=data)
    notify(job.project, "guard.tripped", job=job, message=d.reason,
           data={"rule": "kl_guard", "action": d.action, "step": d.step, "to_step": d.to_step})
    hp_before = {k: job_hp(job).get(k) for k in d.hp}
    audit(actor=None, action=f"kl_guard.{d.action}", project=job.project, obj=job, summary=d.reason,
          before={"step": d.step, "hp": hp_before, "values": d.values},
          after={"to_step": d.to_step, "hp": d.hp} if target else {"state": "cancelled"})
    try:
        if target is None:
            launch.job_cancel(job=job, user=None)
        else:  # job_resume stops the running attempt itself, then starts the new one from the checkpoint
            launch.job_resume(job=job, user=None, reason="kl_guard", checkpoint=target, hp_overrides=d.hp)
    except ApplicationError as exc:
        RunEvent.objects.create(job=job, kind="kl_guard", step=d.step,
                                message=f"KL guard could not {d.action} the run: {exc.message}"[:500],
                                data={"error": exc.message})
        logger.warning("job %s: KL guard %s failed: %s", job.pk, d.action, exc.message)


def guard_status(job: Job) -> dict[str, Any]:
    """What the guard is set to and what it has done, for the job page."""
    cfg = guard_config(job)
    record = KLGuardRecord.objects.filter(job=job).first()
    state = GuardState.from_dict(record.state if record else None)
    return {"config": cfg, "state": state, "trips": record.trips if record else 0}
