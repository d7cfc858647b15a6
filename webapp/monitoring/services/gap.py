"""The reward-vs-human gap of periodic human evaluation: the run's mean reward rose since the compared
checkpoint while people did not prefer the newer one. Checked when a periodic task closes (its verdicts are
hidden until then), flagged, logged and notified once.

The schedule is the job's config["human_eval"] (set on the job form, checked by training.jobconfig):
{"every": N, "against": "previous" | "base", "items": K, "dataset_version": id | None, "split": "val" |
"train", "reward_rise": X, "max_response_length": T}.
"""
from __future__ import annotations

from typing import Any

from django.utils import timezone

from webapp.core.text import count
from webapp.monitoring.blind_results import blind_results
from webapp.monitoring.models import BlindTask
from webapp.notifications.services import notify
from webapp.runs.models import Job, MetricPoint, RunEvent

REWARD_METRIC = "critic/score/mean"
REWARD_WINDOW = 5  # the reward at a step: the mean of the last 5 logged values up to it
DEFAULT_RISE = 0.1
GAP_RULE = ("Flagged when the mean reward ({metric}, last {window} logged values) rose by more than {rise:g} "
            "since the compared checkpoint while people preferred the new checkpoint in at most half of the "
            "judged pairs and the 95 % interval of that human win rate lies wholly below 0.5 (checked when the "
            "blind task closes).")


def schedule_of(job: Job) -> dict[str, Any] | None:
    sched = (job.config or {}).get("human_eval")
    if not isinstance(sched, dict) or not int(sched.get("every") or 0) >= 1:
        return None
    return sched


def gap_rule(sched: dict[str, Any] | None) -> str:
    rise = float((sched or {}).get("reward_rise", DEFAULT_RISE) or DEFAULT_RISE)
    return GAP_RULE.format(metric=REWARD_METRIC, window=REWARD_WINDOW, rise=rise)


def reward_at(job: Job, step: int, *, first: bool = False) -> float | None:
    """The mean of the last REWARD_WINDOW logged rewards up to `step` (the first ones when `first`)."""
    qs = MetricPoint.objects.filter(job=job, name=REWARD_METRIC, value__isnull=False)
    qs = qs.order_by("step") if first else qs.filter(step__lte=step).order_by("-step")
    vals = list(qs.values_list("value", flat=True)[:REWARD_WINDOW])
    return sum(vals) / len(vals) if vals else None


def gap_check(task: BlindTask) -> dict[str, Any]:
    """Recompute a periodic task's gap (stored on it); flags, notifies and logs once when it first holds."""
    if task.opponent_step is None or task.b_checkpoint_id is None:
        return {}
    ckpt = task.b_checkpoint
    job = ckpt.job
    sched = schedule_of(job) or {}
    threshold = float(sched.get("reward_rise", DEFAULT_RISE) or DEFAULT_RISE)
    after = reward_at(job, ckpt.step)
    before = reward_at(job, task.opponent_step, first=task.opponent_step == 0)
    human = blind_results(task).b
    rise = None if after is None or before is None else after - before
    flagged = bool(rise is not None and rise > threshold and human.n and human.rate <= 0.5 and human.hi < 0.5)
    gap = {"metric": REWARD_METRIC, "before": before, "after": after, "rise": rise, "threshold": threshold,
           "human_rate": human.rate, "human_lo": human.lo, "human_hi": human.hi, "n": human.n, "flagged": flagged,
           "rule": gap_rule(sched)}
    task.gap = gap
    fields = ["gap", "updated_at"]
    newly = flagged and task.flagged_at is None
    if newly:
        task.flagged_at = timezone.now()
        fields.append("flagged_at")
    task.save(update_fields=fields)
    if newly:
        text = (f"Reward may be hacked: step {ckpt.step}'s mean reward rose by {rise:.3f} since "
                f"{task.opponent}, but people preferred it in {human.rate:.0%} of {count(human.n, 'pair')} "
                f"(95 % interval {human.lo:.2f}–{human.hi:.2f}).")
        RunEvent.objects.create(job=job, kind="reward_gap", step=ckpt.step, message=text[:500],
                                data={"task": task.pk, **{k: v for k, v in gap.items() if k != "rule"}})
        notify(task.project, "human_eval.gap", job=job, message=text, data={"task": task.pk, "rise": rise,
                                                                              "human_rate": human.rate})
    return gap
