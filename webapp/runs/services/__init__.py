"""Runs services (HackSoft style: keyword-only, validated, audited). Public API re-exported here.

Contract with webapp.monitoring: job_create, job_launch, job_cancel, job_resume, job_create_child,
sync_job, sync_active_jobs keep these names and signatures.
"""
from __future__ import annotations

from webapp.runs.services.launch import (  # noqa: F401
    JobValidationError, current_attempt, job_cancel, job_create, job_create_child, job_launch, job_queue,
    job_resume, latest_checkpoint, resume_target,
)
from webapp.runs.services.registry import build_demo_models, import_smollm2, model_delete, model_register  # noqa: F401
from webapp.runs.services.sync import sync_active_jobs, sync_job  # noqa: F401
