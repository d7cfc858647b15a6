"""The run guard: the job's health rules (training.guard_rules, the KL guard among them) on newly ingested
points, and the actions they decide.

Rules are declared per job in `job.config["guard_rules"]` (a list; presets may fill it: the built-in "kl"
rule is the KL guard). Every trip leaves a "guard_rule" run event (a marker on the rule's chart and a line in
the history), a notification and an audit entry; stop cancels the run, restore resumes it from the chosen
checkpoint with the new settings, branch starts a child run from it while this run continues.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from django.db import transaction

from training.guard_rules import (
    BRANCH,
    RESTORE,
    STOP,
    WARN,
    Decision,
    EngineState,
    Rule,
    RuleConfigError,
    RuleEngine,
    parse_rules,
)
from webapp.core.audit import audit
from webapp.core.services import ApplicationError
from webapp.monitoring.models import GuardRulesRecord
from webapp.notifications.services import notify
from webapp.runs.models import ACTIVE_STATES, Checkpoint, CheckpointStatus, Job, RunEvent
from webapp.runs.services import launch

logger = logging.getLogger(__name__)
EVENT_KIND = "guard_rule"


def job_rules(job: Job) -> list[Rule]:
    """The job's rules; an invalid declaration (refused at launch, so only from an old job) disables them."""
    try:
        return parse_rules((job.config or {}).get("guard_rules"))
    except RuleConfigError as exc:
        logger.warning("job %s: guard rules disabled: %s", job.pk, exc)
        return []


def checkpoint_candidates(job: Job) -> dict[int, Checkpoint]:
    """{step: checkpoint} a restore may go back to: the run's available checkpoints and the one it resumed from."""
    out = {c.step: c for c in Checkpoint.objects.filter(job=job, status=CheckpointStatus.AVAILABLE)}
    if job.resume_checkpoint_id:
        parent = Checkpoint.objects.filter(pk=job.resume_checkpoint_id, status=CheckpointStatus.AVAILABLE).first()
        if parent is not None:
            out.setdefault(parent.step, parent)
    return out


def _engine(job: Job, rules: list[Rule], record: GuardRulesRecord | None) -> RuleEngine:
    return RuleEngine(rules, EngineState.from_dict(record.state if record else None))


def guard_process(*, job: Job, new_points: Iterable[tuple[int, str, Any]]) -> list[Decision]:
    """Feed an active job's new points to its rules; record every trip and act on it."""
    from webapp.monitoring.selectors import job_hp

    rules = job_rules(job)
    if not any(r.enabled for r in rules) or job.state not in ACTIVE_STATES:
        return []
    points = list(new_points)
    if not points:
        return []
    candidates = checkpoint_candidates(job)
    with transaction.atomic():
        record, _ = GuardRulesRecord.objects.select_for_update().get_or_create(job=job)
        engine = _engine(job, rules, record)
        decisions = engine.feed(points, candidates.keys(), job_hp(job))
        record.state = engine.state.to_dict()
        record.trips += len(decisions)
        record.save()
    for d in decisions:
        _act(job, d, candidates)
    return decisions


def _act(job: Job, d: Decision, candidates: dict[int, Checkpoint]) -> None:
    from webapp.monitoring.selectors import job_hp

    target = candidates.get(d.to_step) if d.action in (RESTORE, BRANCH) and d.to_step is not None else None
    data = {**d.to_dict(), "checkpoint": target.pk if target else None,
            "checkpoint_job": target.job_id if target else None}
    with transaction.atomic():  # the run's event and the audit entry of one trip are written together
        RunEvent.objects.create(job=job, kind=EVENT_KIND, step=d.step, message=d.reason[:500], data=data)
        audit(actor=None, action=f"guard_rule.{d.action}", project=job.project, obj=job, summary=d.reason,
              before={"rule": d.rule, "step": d.step, "values": d.values,
                      "hp": {k: job_hp(job).get(k) for k in d.hp}},
              after={"to_step": d.to_step, "hp": d.hp} if target else {"action": d.action})
    notify(job.project, "guard.tripped", job=job, message=d.reason, data={"rule": d.rule, "action": d.action,
                                                                           "step": d.step, "to_step": d.to_step})
    if job.is_attached and d.action != WARN:  # not the app's process: the notification above is all it can do
        RunEvent.objects.create(job=job, kind=EVENT_KIND, step=d.step, data={"rule": d.rule, "action": WARN},
                                message=f"Rule {d.rule} would {d.action} the run; an attached run is only warned about")
        return
    try:
        if d.action == STOP:
            launch.job_cancel(job=job, user=None)
        elif d.action == RESTORE and target is not None:
            launch.job_resume(job=job, user=None, reason="guard_rule", checkpoint=target, hp_overrides=d.hp)
        elif d.action == BRANCH and target is not None:
            launch.job_create_child(parent=job, checkpoint=target, user=None, hp_overrides=d.hp,
                                    reason="guard_branch")
    except ApplicationError as exc:
        RunEvent.objects.create(job=job, kind=EVENT_KIND, step=d.step,
                                message=f"Rule {d.rule} could not {d.action} the run: {exc.message}"[:500],
                                data={"rule": d.rule, "error": exc.message, "action": WARN})
        logger.warning("job %s: rule %s %s failed: %s", job.pk, d.rule, d.action, exc.message)


def restore_target(job: Job) -> set[int]:
    """The checkpoint of this run a restore or branch would go back to now: retention must keep it."""
    rules = [r for r in job_rules(job) if r.enabled and r.action in (RESTORE, BRANCH)]
    if not rules or job.state not in ACTIVE_STATES:
        return set()
    steps = Checkpoint.objects.filter(job=job, status=CheckpointStatus.AVAILABLE).values_list("step", flat=True)
    target = _engine(job, rules, GuardRulesRecord.objects.filter(job=job).first()).good_checkpoint(steps)
    return set() if target is None else {target}


_READ = object()


def rules_status(job: Job, record: Any = _READ) -> list[dict[str, Any]]:
    """Each rule that is on with its state (ok / warming_up / tripped), trips and last value, for the run page
    (`record`: the job's GuardRulesRecord or None when the caller read it already)."""
    rules = job_rules(job)
    if not rules:
        return []
    if record is _READ:
        record = GuardRulesRecord.objects.filter(job=job).first()
    return _engine(job, rules, record).statuses()


def job_rules_set(*, job: Job, user, rules: Any) -> list[Rule]:
    """Replace a run's rules (engineers); a rule keeping its name keeps its state (baseline, streak)."""
    try:
        parsed = parse_rules(rules)
    except RuleConfigError as exc:
        raise ApplicationError(f"Guard rules: {exc}.", field="guard_rules") from None
    if job.is_attached and any(r.enabled and r.action != WARN for r in parsed):
        raise ApplicationError("An attached run's rules can only warn: the app does not own its process.",
                               field="guard_rules")
    if any(r.enabled and r.action in (RESTORE, BRANCH) for r in parsed) and \
            not (job.config.get("hp") or {}).get("save_freq"):
        raise ApplicationError("A restore rule needs checkpoints: this run saves none (save_freq 0).",
                               field="guard_rules")
    before = (job.config or {}).get("guard_rules") or []
    names = ", ".join(r.name for r in parsed if r.enabled) or "none"
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        locked.config = {**locked.config, "guard_rules": list(rules)}
        locked.save(update_fields=["config", "updated_at"])
        RunEvent.objects.create(job=job, kind="config", step=job.last_step, actor=user if user and
                                user.is_authenticated else None,
                                message=f"health rules set: {names}"[:500], data={"guard_rules": list(rules)})
        audit(actor=user, action="job.guard_rules", project=job.project, obj=job,
              summary=f"Health rules of run #{job.pk}: {names}", before=before, after=list(rules))
    job.config = locked.config
    return parsed
