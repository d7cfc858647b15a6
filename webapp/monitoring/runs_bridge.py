"""The one place monitoring calls the runs app's job services (create child, resume, cancel).

Imported lazily so that this app loads even while the runs services are being reworked, and so
that tests can patch a single module.
"""
from __future__ import annotations

from typing import Any


def _services():
    from webapp.runs import services

    return services


def job_create_child(*, parent, checkpoint, user, hp_overrides: dict[str, Any] | None = None,
                     reason: str = "rollback"):
    return _services().job_create_child(parent=parent, checkpoint=checkpoint, user=user,
                                        hp_overrides=hp_overrides, reason=reason)


def job_resume(*, job, user, reason: str = "resume", checkpoint=None, hp_overrides: dict[str, Any] | None = None):
    return _services().job_resume(job=job, user=user, reason=reason, checkpoint=checkpoint,
                                  hp_overrides=hp_overrides)


def job_cancel(*, job, user):
    return _services().job_cancel(job=job, user=user)
