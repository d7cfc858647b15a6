"""The one way features write to the audit log."""
from __future__ import annotations

from typing import Any

from webapp.core.models import AuditLog, Project


def audit(*, actor, action: str, project: Project | None = None, obj: Any = None, summary: str = "",
          before: Any = None, after: Any = None) -> AuditLog:
    entry = audit_entry(actor=actor, action=action, project=project, obj=obj, summary=summary, before=before,
                        after=after)
    entry.save()
    return entry


def audit_entry(*, actor, action: str, project: Project | None = None, obj: Any = None, summary: str = "",
                before: Any = None, after: Any = None) -> AuditLog:
    """The entry `audit` writes, unsaved (for a caller that writes it with its other changes in one statement)."""
    return AuditLog(
        actor=actor if getattr(actor, "is_authenticated", False) else None,
        project=project,
        action=action,
        object_type=type(obj).__name__ if obj is not None else "",
        object_id=str(getattr(obj, "pk", "") or "") if obj is not None else "",
        summary=summary[:500],
        before=before,
        after=after,
    )
