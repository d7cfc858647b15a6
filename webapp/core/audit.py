"""The one way features write to the audit log."""
from __future__ import annotations

from typing import Any

from webapp.core.models import AuditLog, Project


def audit(*, actor, action: str, project: Project | None = None, obj: Any = None, summary: str = "",
          before: Any = None, after: Any = None) -> AuditLog:
    return AuditLog.objects.create(
        actor=actor if getattr(actor, "is_authenticated", False) else None,
        project=project,
        action=action,
        object_type=type(obj).__name__ if obj is not None else "",
        object_id=str(getattr(obj, "pk", "") or "") if obj is not None else "",
        summary=summary[:500],
        before=before,
        after=after,
    )
