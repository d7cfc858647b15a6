"""Runs services (HackSoft style: keyword-only, validated, audited). Public API re-exported here, lazily,
so that `webapp.runs.services.config` (pure) imports without Django.

Contract with webapp.monitoring: job_create, job_launch, job_cancel, job_resume, job_create_child,
sync_job, sync_active_jobs keep these names and signatures.
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "launch": ("JobValidationError", "current_attempt", "job_cancel", "job_create", "job_create_child", "job_launch",
               "job_queue", "job_resume", "latest_checkpoint", "resume_target"),
    "registry": ("build_demo_models", "import_smollm2", "model_register", "model_register_from_checkpoint"),
    "sync": ("sync_active_jobs", "sync_job"),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
