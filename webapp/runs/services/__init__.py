"""Runs services (keyword-only, validated, audited): the job lifecycle and the sync."""
from webapp.runs.services.launch import (
    current_attempt,
    job_cancel,
    job_create_child,
    job_resume,
    latest_checkpoint,
    resume_target,
)
from webapp.runs.services.plan import JobValidationError, job_create, job_queue
from webapp.runs.services.start import job_launch
from webapp.runs.services.sync import sync_active_jobs, sync_job

__all__ = [
    "JobValidationError", "current_attempt", "job_cancel", "job_create",
    "job_create_child", "job_launch", "job_queue", "job_resume", "latest_checkpoint",
    "resume_target", "sync_active_jobs", "sync_job",
]
