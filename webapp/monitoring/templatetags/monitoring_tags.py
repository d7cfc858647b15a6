"""`{% monitor_panel job as m %}`: everything monitoring/_job_panel.html needs, from just the job.

The runs app's job page includes the panel with only `job` (and `request`) in its context.
"""
from __future__ import annotations

import math

from django import template

from webapp.core.access import ProjectAccess, user_role
from webapp.monitoring import charts, selectors, winrates
from webapp.monitoring.forms import ExportForm, HumanEvalForm, RollbackForm
from webapp.monitoring.services.checkpoints import checkpoint_is_lora, protected_steps
from webapp.monitoring.services.guard import rules_status
from webapp.monitoring.services.stall import stall_status
from webapp.runs.models import Checkpoint

register = template.Library()

TABLE_METRICS = [("critic/score/mean", "reward"), ("actor/kl_loss", "KL")]
HISTORY_LIMIT = 200
CHECKPOINTS_PER_PAGE = 25  # a days-long run saves hundreds: the table shows a page of them, newest first


def _win_rate_columns(names: list[str]) -> list[tuple[str, str]]:
    """(data source, column title) of the validation win rates the table shows (two at most)."""
    return [(s, f"Validation win rate {s}" if s != "default" else "Validation win rate")
            for s in charts.win_rate_sources(names)][:2]


@register.simple_tag(takes_context=True)
def checkpoint_panel(context, job) -> dict:
    """What the checkpoint table (monitoring/_checkpoints.html) needs, and no more: the job page swaps the
    table in alone when it changes, so this is all that request computes."""
    request = context.get("request")
    role = user_role(request.user, job.project) if request is not None else None
    access = ProjectAccess(project=job.project, role=role) if role else None
    names = selectors.metric_names(job)
    table_metrics = TABLE_METRICS
    win_columns = _win_rate_columns(names)
    keys = [k for k, _ in table_metrics] + [k for s, _ in win_columns for k in winrates.metric_keys(s)]
    total = Checkpoint.objects.filter(job=job).count()
    pages = max(1, math.ceil(total / CHECKPOINTS_PER_PAGE))
    try:
        page = min(pages, max(1, int(request.GET.get("ckpt_page", 1)))) if request is not None else 1
    except ValueError:
        page = 1
    rows = selectors.checkpoint_rows(job, keys, offset=(page - 1) * CHECKPOINTS_PER_PAGE, limit=CHECKPOINTS_PER_PAGE)
    base = context.get("back") or (request.path if request is not None else "")
    for row in rows:
        row["metric_values"] = [row["metrics"].get(k) for k, _ in table_metrics]
        row["win_cells"] = [winrates.from_metrics(row["metrics"], s) for s, _ in win_columns]
        ev = row["evaluation"]
        row["evaluation_view"] = winrates.from_evaluation(ev) if ev is not None else None
        row["lora"] = row["available"] and checkpoint_is_lora(row["checkpoint"])
    return {
        "access": access, "can_engineer": bool(access and access.can_engineer), "names": names,
        "checkpoints": rows, "checkpoint_count": total, "checkpoint_page": page, "checkpoint_pages": pages,
        "newer_url": f"{base}?ckpt_page={page - 1}#checkpoints" if page > 1 else "",
        "older_url": f"{base}?ckpt_page={page + 1}#checkpoints" if page < pages else "",
        "table_metrics": [label for _, label in table_metrics],
        "win_columns": [title for _, title in win_columns], "protected": protected_steps(job),
        "lineage": selectors.lineage(job), "rollback_form": RollbackForm(job=job), "hp": selectors.job_hp(job),
    }


@register.simple_tag(takes_context=True)
def monitor_panel(context, job) -> dict:
    panel = checkpoint_panel(context, job)
    names = panel.pop("names")
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
        **panel, "config": config, "history": history, "rules": rules_status(job), "stall": stall_status(job),
        "export_form": ExportForm(), "human_eval_form": HumanEvalForm(), "gap": selectors.reward_gap_flags(job),
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
