"""Runs services (keyword-only, validated, audited): the job lifecycle, the model registry and the sync."""
from webapp.runs.services.launch import (
    JobValidationError,
    current_attempt,
    job_cancel,
    job_create,
    job_create_child,
    job_launch,
    job_queue,
    job_resume,
    latest_checkpoint,
    resume_target,
)
from webapp.runs.services.registry import (
    build_demo_models,
    import_smollm2,
    model_register,
    model_register_from_checkpoint,
)
from webapp.runs.services.sync import sync_active_jobs, sync_job

__all__ = [
    "JobValidationError", "build_demo_models", "current_attempt", "import_smollm2", "job_cancel", "job_create",
    "job_create_child", "job_launch", "job_queue", "job_resume", "latest_checkpoint", "model_register",
    "model_register_from_checkpoint", "resume_target", "sync_active_jobs", "sync_job",
]
