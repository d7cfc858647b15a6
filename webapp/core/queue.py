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


CPU_QUEUE = "cpu"  # launches, syncs, imports, exports, arenas: the app's own work
GPU_QUEUE = "gpu"
# Tasks that run users' reward code (in the sandbox) have their own queue and worker, so a reward that never
# returns holds up other reward code at worst, never a launch, an import or a sync (jobs/celery.py routes them
# there by default too; `./run`, docker-compose and the tests' worker fixture consume it in its own process).
USER_CODE_QUEUE = "usercode"
USER_CODE_TASKS = frozenset({RUN_REWARD_TEST, RUN_REWARD_PROBES, RESCORE_RUN, RUN_JUDGE, ZERO_SIGNAL,
                             EVALUATE_CHECKPOINT})


def queue_for(task: str, queue: str = CPU_QUEUE) -> str:
    """The queue `task` goes to when asked for `queue`: user code never goes to the cpu queue."""
    return USER_CODE_QUEUE if task in USER_CODE_TASKS and queue == CPU_QUEUE else queue


def enqueue(task: str, *args: int, queue: str = CPU_QUEUE, countdown: float | None = None) -> None:
    """Send `task(*args)` to `queue` (the user-code queue instead of cpu for USER_CODE_TASKS), after
    `countdown` seconds when given."""
    current_app.send_task(task, args=list(args), queue=queue_for(task, queue), countdown=countdown)
