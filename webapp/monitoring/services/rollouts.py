"""Retention of a run's rollout store (samples/rollout/<step>.jsonl): after every sync of the job, the
dumps its settings let go are deleted (training.rollouts.plan_retention)."""
from __future__ import annotations

import logging

from training import hparams, rollouts
from webapp.runs.models import Job, RunEvent

logger = logging.getLogger(__name__)
SETTINGS = ("rollout_keep_last", "rollout_keep_every", "rollout_max_mb")


def rollout_retention(job: Job) -> dict[str, float | None]:
    """The job's rollout-store limits; a job from before these settings gets their defaults."""
    from webapp.monitoring.selectors import job_hp

    hp = job_hp(job)
    out: dict[str, float | None] = {}
    for key in SETTINGS:
        value = hp.get(key, hparams.BY_KEY[key].default)
        try:
            out[key] = float(value) if value is not None else None
        except (TypeError, ValueError):
            out[key] = float(hparams.BY_KEY[key].default)
    return out


def rollout_retention_apply(*, job: Job) -> list[int]:
    """Delete the rollout dumps the job's retention lets go; a run event says which steps went."""
    if not job.run_dir:
        return []
    limits = rollout_retention(job)
    keep_last, every = limits["rollout_keep_last"], limits["rollout_keep_every"]
    deleted = rollouts.prune(job.run_dir, int(keep_last) if keep_last is not None else None,
                             int(every) if every is not None else None, limits["rollout_max_mb"])
    if deleted:
        shown = ", ".join(map(str, deleted[:20])) + (f" and {len(deleted) - 20} more" if len(deleted) > 20 else "")
        RunEvent.objects.create(job=job, kind="retention", step=deleted[-1],
                                message=f"Rollout store: deleted the samples of steps {shown}"[:500],
                                data={"rollout_steps_deleted": deleted, **limits})
    return deleted
