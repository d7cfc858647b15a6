"""Template helpers for the runs pages."""
from __future__ import annotations

from django import template
from django.template.loader import get_template

register = template.Library()


@register.simple_tag(takes_context=True)
def optional_include(context, template_name: str, **extra):
    """Render `template_name` with the current context (+ extra), or nothing when it does not exist.

    The job page uses it for the monitoring panel (charts, checkpoints, samples), which another app owns.
    """
    try:
        tpl = get_template(template_name)
    except template.TemplateDoesNotExist:
        return ""
    flat = context.flatten()
    flat.update(extra)
    return tpl.render(flat, context.get("request"))


@register.filter
def filesize(n):
    try:
        n = float(n)
    except (TypeError, ValueError):
        return ""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


@register.filter
def percent(x):
    return "" if x is None else f"{100 * x:.0f}%"


@register.filter
def pct_int(x):
    return "" if x is None else int(round(100 * x))


@register.filter
def share(x):
    """A share with one decimal: 0.034 -> "3.4%"."""
    return "" if x is None else f"{100 * x:.1f}%"
