"""`{% monitor_panel job as m %}`: everything monitoring/_job_panel.html needs, from just the job.

The runs app's job page includes the panel with only `job` (and `request`) in its context.
"""
from __future__ import annotations

from django import template

from webapp.core.access import ProjectAccess, user_role
from webapp.monitoring import charts, selectors, winrates
from webapp.monitoring.forms import ExportForm, HumanEvalForm, RollbackForm
from webapp.monitoring.services.checkpoints import checkpoint_is_lora, protected_steps
from webapp.monitoring.services.guard import rules_status
from webapp.monitoring.services.stall import stall_status

register = template.Library()

TABLE_METRICS = [("critic/score/mean", "reward"), ("actor/kl_loss", "KL")]
HISTORY_LIMIT = 200


def _win_rate_columns(names: list[str]) -> list[tuple[str, str]]:
    """(data source, column title) of the validation win rates the table shows (two at most)."""
    return [(s, f"Validation win rate {s}" if s != "default" else "Validation win rate")
            for s in charts.win_rate_sources(names)][:2]


@register.simple_tag(takes_context=True)
def monitor_panel(context, job) -> dict:
    request = context.get("request")
    role = user_role(request.user, job.project) if request is not None else None
    access = ProjectAccess(project=job.project, role=role) if role else None
    names = selectors.metric_names(job)
    table_metrics = TABLE_METRICS
    win_columns = _win_rate_columns(names)
    keys = [k for k, _ in table_metrics] + [k for s, _ in win_columns for k in winrates.metric_keys(s)]
    rows = selectors.checkpoint_rows(job, keys)
    for row in rows:
        row["metric_values"] = [row["metrics"].get(k) for k, _ in table_metrics]
        row["win_cells"] = [winrates.from_metrics(row["metrics"], s) for s, _ in win_columns]
        ev = row["evaluation"]
        row["evaluation_view"] = winrates.from_evaluation(ev) if ev is not None else None
        row["lora"] = row["available"] and checkpoint_is_lora(row["checkpoint"])
    protected = protected_steps(job)
    history = selectors.events(job)[-HISTORY_LIMIT:][::-1]
    slug = job.project.slug
    config = {
        "jobId": job.pk, "kind": job.kind, "isActive": job.is_active, "state": job.state,
        "api": f"/api/projects/{slug}/monitor/jobs/{job.pk}/",
        "samplesUrl": f"/p/{slug}/monitor/jobs/{job.pk}/samples/",
        "charts": charts.default_charts(job.kind, names, job.config), "names": names,
        "events": selectors.events(job), "marks": selectors.win_rate_marks(job),
        "ancestors": [{**a, "api": f"/api/projects/{slug}/monitor/jobs/{a['job']}/"} for a in selectors.ancestry(job)],
        "pollMs": 2000,
        "checkpointsKey": selectors.checkpoint_table_state(job)[0],
        "checkpointsUrl": f"/p/{slug}/monitor/jobs/{job.pk}/checkpoints/",
    }
    return {
        "access": access, "can_engineer": bool(access and access.can_engineer), "config": config,
        "checkpoints": rows, "table_metrics": [label for _, label in table_metrics],
        "win_columns": [title for _, title in win_columns], "protected": protected,
        "lineage": selectors.lineage(job), "history": history,
        "rules": rules_status(job), "stall": stall_status(job),
        "rollback_form": RollbackForm(job=job), "export_form": ExportForm(),
        "human_eval_form": HumanEvalForm(), "hp": selectors.job_hp(job),
        "gap": selectors.reward_gap_flags(job),
    }


RULE_STATES = {"ok": "ok", "warming_up": "warming up", "tripped": "tripped"}


@register.filter
def rule_state(value) -> str:
    return RULE_STATES.get(str(value), str(value))


@register.filter
def metric(value) -> str:
    """Compact number for tables: 4 significant digits, '—' when missing."""
    if value is None:
        return "—"
    try:
        return f"{float(value):.4g}"
    except (TypeError, ValueError):
        return str(value)


@register.filter
def filesize(value) -> str:
    try:
        size = float(value or 0)
    except (TypeError, ValueError):
        return "—"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1024 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return ""


@register.filter
def percent(value) -> str:
    return "—" if value is None else f"{100 * float(value):.1f}%"


@register.inclusion_tag("monitoring/_lineage_node.html")
def lineage_node(node, slug):
    return {"node": node, "slug": slug}
