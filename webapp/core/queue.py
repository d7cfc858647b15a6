"""Hand work to the Celery worker by task name.

The worker's tasks (`jobs.tasks`) call the web app's services, so the services never import the
task module back: they send the task's registered name. `jobs` is an installed app, so the Celery
app exists (and is Celery's current app) in every process that runs Django.
"""
from __future__ import annotations

from celery import current_app

LAUNCH_JOB = "jobs.tasks.launch_job"
SYNC_RUNS = "jobs.tasks.sync_runs"
INGEST_DATASET = "jobs.tasks.ingest_dataset"
EVALUATE_CHECKPOINT = "jobs.tasks.evaluate_checkpoint"
EXPORT_CHECKPOINT = "jobs.tasks.export_checkpoint"
GENERATE_ARENA = "jobs.tasks.generate_arena"
RUN_REWARD_TEST = "jobs.tasks.run_reward_test"
RUN_REWARD_PROBES = "jobs.tasks.run_reward_probes"
DELIVER_NOTIFICATION = "jobs.tasks.deliver_notification"
QUALITY_REPORT = "jobs.tasks.dataset_quality_report"
RUN_JUDGE = "jobs.tasks.run_judge"
PREPARE_HUMAN_EVAL = "jobs.tasks.prepare_human_eval"
RESCORE_RUN = "jobs.tasks.rescore_run"
ZERO_SIGNAL = "jobs.tasks.zero_signal_dry_run"
BUILD_BUNDLE = "jobs.tasks.build_bundle"
CAPTURE_STACKS = "jobs.tasks.capture_stacks"


def enqueue(task: str, *args: int, queue: str = "cpu", countdown: float | None = None) -> None:
    """Send `task(*args)` to `queue` (after `countdown` seconds when given)."""
    current_app.send_task(task, args=list(args), queue=queue, countdown=countdown)
