"""Run the job's health rules (training.guard_rules) on newly ingested points and act on the decisions.

Rules are declared per job in `job.config["guard_rules"]` (a list; presets may fill it). Every trip
leaves a "guard_rule" run event (a marker on the rule's chart and a line in the history) and an audit
entry; stop cancels the run, restore resumes it from the chosen checkpoint with the new settings,
branch starts a child run from it while this run continues.
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
from webapp.monitoring.services.guard import checkpoint_candidates
from webapp.notifications.services import notify
from webapp.runs.models import ACTIVE_STATES, Job, RunEvent
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


def guard_rules_process(*, job: Job, new_points: Iterable[tuple[int, str, Any]]) -> list[Decision]:
    """Feed an active job's new points to its rules; record every trip and act on it."""
    from webapp.monitoring.selectors import job_hp

    rules = job_rules(job)
    if not rules or job.state not in ACTIVE_STATES:
        return []
    points = list(new_points)
    if not points:
        return []
    candidates = checkpoint_candidates(job, rules[0].metric)
    with transaction.atomic():
        record, _ = GuardRulesRecord.objects.select_for_update().get_or_create(job=job)
        engine = RuleEngine(rules, EngineState.from_dict(record.state))
        decisions = engine.feed(points, candidates.keys(), job_hp(job))
        record.state = engine.state.to_dict()
        record.trips += len(decisions)
        record.save()
    for d in decisions:
        _act(job, d, candidates)
    return decisions


def _act(job: Job, d: Decision, candidates) -> None:
    from webapp.monitoring.selectors import job_hp

    target = candidates[d.to_step][0] if d.action in (RESTORE, BRANCH) and d.to_step is not None else None
    data = {**d.to_dict(), "checkpoint": target.pk if target else None}
    RunEvent.objects.create(job=job, kind=EVENT_KIND, step=d.step, message=d.reason[:500], data=data)
    notify(job.project, "guard.tripped", job=job, message=d.reason, data={"rule": d.rule, "action": d.action,
                                                                           "step": d.step, "to_step": d.to_step})
    audit(actor=None, action=f"guard_rule.{d.action}", project=job.project, obj=job, summary=d.reason,
          before={"rule": d.rule, "step": d.step, "values": d.values,
                  "hp": {k: job_hp(job).get(k) for k in d.hp}},
          after={"to_step": d.to_step, "hp": d.hp} if target else {"action": d.action})
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


def rules_status(job: Job) -> list[dict[str, Any]]:
    """Each rule with its state (ok / warming_up / tripped), trips and last judged value, for the run page."""
    rules = job_rules(job)
    if not rules:
        return []
    record = GuardRulesRecord.objects.filter(job=job).first()
    return RuleEngine(rules, EngineState.from_dict(record.state if record else None)).statuses()


def job_rules_set(*, job: Job, user, rules: Any) -> list[Rule]:
    """Replace a run's rules (engineers); a rule keeping its name keeps its state (baseline, streak)."""
    try:
        parsed = parse_rules(rules)
    except RuleConfigError as exc:
        raise ApplicationError(f"Guard rules: {exc}.", field="guard_rules") from None
    if job.is_attached and any(r.action != WARN for r in parsed):
        raise ApplicationError("An attached run's rules can only warn: the app does not own its process.",
                               field="guard_rules")
    if any(r.action == RESTORE for r in parsed) and not (job.config.get("hp") or {}).get("save_freq"):
        raise ApplicationError("A restore rule needs checkpoints: this run saves none (save_freq 0).",
                               field="guard_rules")
    before = (job.config or {}).get("guard_rules") or []
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        locked.config = {**locked.config, "guard_rules": list(rules)}
        locked.save(update_fields=["config", "updated_at"])
        RunEvent.objects.create(job=job, kind="config", step=job.last_step, actor=user if user and
                                user.is_authenticated else None,
                                message=f"health rules set: {', '.join(r.name for r in parsed) or 'none'}"[:500],
                                data={"guard_rules": list(rules)})
        audit(actor=user, action="job.guard_rules", project=job.project, obj=job,
              summary=f"Health rules of run #{job.pk}: {', '.join(r.name for r in parsed) or 'none'}",
              before=before, after=list(rules))
    job.config = locked.config
    return parsed
