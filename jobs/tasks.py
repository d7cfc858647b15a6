"""Celery tasks: ids in, one service call, nothing else."""
from __future__ import annotations

from celery import shared_task

from webapp.core import queue


@shared_task(name="jobs.tasks.ping")
def ping(project_id: int) -> str:
    """Round trip through broker, worker and database (used by health checks and tests)."""
    from webapp.core.models import Project

    project = Project.objects.get(pk=project_id)
    from webapp.core.audit import audit

    audit(actor=None, action="worker.ping", project=project, obj=project, summary="worker ping")
    return project.slug


@shared_task(name=queue.SYNC_RUNS)
def sync_runs() -> None:
    """Beat task: ingest metrics and checkpoints of active runs and detect lost ones."""
    from webapp.runs.services.sync import sync_active_jobs

    sync_active_jobs()


@shared_task(name=queue.LAUNCH_JOB)
def launch_job(job_id: int) -> str:
    """Claim and start one job (routed per call to job.queue: `cpu` or `gpu`); returns at once."""
    from webapp.runs.services.start import job_launch

    return job_launch(job_id)


@shared_task(name=queue.INGEST_DATASET)
def ingest_dataset(import_id: int) -> None:
    """Import an uploaded dataset file (webapp.datasets.models.DatasetImport); a redelivery does nothing."""
    from webapp.datasets.isolation import import_capped
    from webapp.datasets.models import DatasetKind
    from webapp.review.services import ensure_pair_states

    version = import_capped(import_id)  # in a child process under DATASET_IMPORT_MEMORY_MB
    if version is not None and version.dataset.kind == DatasetKind.PREFERENCE:
        # Big files come through here: prepare their review states on the worker too, so the first
        # visit to the review screen of a 1M-row version does not pay for it.
        ensure_pair_states(version=version)


@shared_task(name=queue.QUALITY_REPORT)
def dataset_quality_report(report_id: int) -> None:
    """Compute a dataset version's quality report (webapp.datasets.models.QualityReport); a redelivery does nothing."""
    from webapp.datasets.quality_service import report_run

    report_run(report_id=report_id)


@shared_task(name=queue.EVALUATE_CHECKPOINT)
def evaluate_checkpoint(evaluation_id: int) -> None:
    """Win-rate evaluation of a checkpoint; the evaluator runs in a subprocess (models, user reward code)."""
    from webapp.monitoring.services import evaluation_run

    evaluation_run(evaluation_id=evaluation_id)


@shared_task(name=queue.GENERATE_ARENA)
def generate_arena(arena_id: int) -> None:
    """Both sides of an arena answer its prompts; generation runs in a subprocess (models load there)."""
    from webapp.monitoring.services.arena import arena_generate

    arena_generate(arena_id=arena_id)


@shared_task(name=queue.EXPORT_CHECKPOINT)
def export_checkpoint(export_id: int) -> None:
    """Zip a checkpoint as a Hugging Face folder (merging LoRA when asked); a redelivery does nothing."""
    from webapp.monitoring.services import export_run

    export_run(export_id=export_id)


@shared_task(name=queue.RUN_JUDGE)
def run_judge(judge_run_id: int) -> None:
    """An automatic judge over a human evaluation's pairs; the judge runs in a subprocess."""
    from webapp.monitoring.services import judge_run

    judge_run(judge_run_id=judge_run_id)


@shared_task(name=queue.PREPARE_HUMAN_EVAL)
def prepare_human_eval(task_id: int) -> None:
    """Generate both sides of a scheduled human evaluation, then open and assign it."""
    from webapp.monitoring.services import human_eval_prepare

    human_eval_prepare(task_id=task_id)


@shared_task(name=queue.RUN_REWARD_TEST)
def run_reward_test(run_id: int) -> None:
    """Score a queued reward test-run in the sandbox (never in a web process); a redelivery does nothing."""
    from webapp.rewards.scoring import reward_test_run_execute

    reward_test_run_execute(run_id=run_id)


@shared_task(name=queue.RUN_REWARD_PROBES)
def run_reward_probes(run_id: int) -> None:
    """Run a reward version's probe suite in the sandbox; a redelivered or finished run does nothing."""
    from webapp.rewards.probes import probe_run_execute

    probe_run_execute(run_id=run_id)


@shared_task(name=queue.RESCORE_RUN)
def rescore_run(rescore_id: int) -> None:
    """Score a run's stored rollout samples with another reward version, in the sandbox; a redelivery does nothing."""
    from webapp.runs.services.rescore import rescore_execute

    rescore_execute(rescore_id=rescore_id)


@shared_task(name=queue.DELIVER_NOTIFICATION, bind=True, max_retries=None)
def deliver_notification(self, delivery_id: int) -> str:
    """Send one notification; a retryable failure comes back after an exponential backoff."""
    from webapp.notifications.services import backoff_s, deliver

    outcome = deliver(delivery_id)
    if outcome == "retry":
        raise self.retry(countdown=backoff_s(self.request.retries + 1))
    return outcome


@shared_task(name=queue.ZERO_SIGNAL)
def zero_signal_dry_run(run_id: int) -> None:
    """Sample and score a prompt set to find its zero-signal prompts (webapp.runs.models.ZeroSignalRun)."""
    from webapp.runs.services.zero_signal import dry_run_execute

    dry_run_execute(run_id=run_id)


@shared_task(name=queue.BUILD_BUNDLE)
def build_bundle(bundle_id: int) -> None:
    """Zip a run's diagnostic bundle (secrets scrubbed); a redelivery does nothing."""
    from webapp.monitoring.services.bundle import bundle_run

    bundle_run(bundle_id=bundle_id)


@shared_task(name=queue.CAPTURE_STACKS)
def capture_stacks(job_id: int, attempt: int) -> None:
    """Stack dump of a stalled attempt, on the host that launched it (the job's queue)."""
    from webapp.monitoring.services.stacks import capture_run

    capture_run(job_id=job_id, attempt_number=attempt)
