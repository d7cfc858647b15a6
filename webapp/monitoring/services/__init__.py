"""Monitoring services: checkpoint actions, the run guard (health rules), evaluations, blind pairwise tasks and
judges."""
from webapp.monitoring.services.blind import task_assign, task_set_open, verdict_record
from webapp.monitoring.services.checkpoints import (
    checkpoint_get,
    checkpoint_promote,
    job_rollback,
    parse_hp_overrides,
    protected_steps,
    retention_apply,
    write_protected,
)
from webapp.monitoring.services.evaluation import evaluation_request, evaluation_run
from webapp.monitoring.services.export import export_ready, export_request, export_run
from webapp.monitoring.services.gap import gap_check
from webapp.monitoring.services.guard import guard_process, job_rules_set, rules_status
from webapp.monitoring.services.human_eval import human_eval_create
from webapp.monitoring.services.judges import judge_choices, judge_request, judge_run
from webapp.monitoring.services.periodic import human_eval_prepare, schedule_process

__all__ = [
    "checkpoint_get", "checkpoint_promote", "evaluation_request", "evaluation_run", "export_ready",
    "export_request", "export_run",
    "guard_process", "human_eval_create", "task_assign", "task_set_open", "verdict_record",
    "job_rollback", "job_rules_set", "parse_hp_overrides", "protected_steps", "retention_apply",
    "rules_status", "write_protected", "judge_choices", "judge_request", "judge_run", "gap_check",
    "human_eval_prepare", "schedule_process",
]
