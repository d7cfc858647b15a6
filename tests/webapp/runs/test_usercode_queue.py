"""Users' reward code has its own queue and worker: hostile test-runs (rewards that never return) hold the
usercode worker, while a launch and a ping on the cpu queue still go through; each test-run stops at its wall
clock, and a project has a cap on test-runs at once."""
from __future__ import annotations

import time

import pytest

from tests.conftest import start_celery_workers, stop_celery_workers
from webapp.core.models import AuditLog, Membership, Role
from webapp.core.queue import CPU_QUEUE, RESCORE_RUN, RUN_REWARD_TEST, USER_CODE_QUEUE, ZERO_SIGNAL, queue_for
from webapp.core.services import ApplicationError
from webapp.rewards.models import RewardTestRun, RewardTestRunState
from webapp.rewards.scoring import reward_test_run_create
from webapp.rewards.services import reward_function_create
from webapp.runs.models import JobState
from webapp.runs.services import job_create

NEVER_RETURNS = '''
import time
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    while True:  # swallows the sandbox's timeout too: only killing the sandbox stops it
        try:
            time.sleep(3600)
        except BaseException:
            pass
    return 0.0
'''
ACTIVE = (RewardTestRunState.QUEUED, RewardTestRunState.RUNNING)


def test_user_code_never_goes_to_the_cpu_queue():
    assert queue_for(RUN_REWARD_TEST) == queue_for(RESCORE_RUN) == queue_for(ZERO_SIGNAL) == USER_CODE_QUEUE
    assert queue_for(RUN_REWARD_TEST, "gpu") == "gpu"  # a GPU worker's own work stays there
    assert queue_for("jobs.tasks.launch_job") == CPU_QUEUE


def _wait(condition, what: str, worker, timeout: float = 180.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"{what} did not happen in {timeout:g} s; workers' log:\n"
                         + worker.log_path.read_text()[-4000:])


@pytest.fixture
def workers_with_a_short_test_run_clock(transactional_db, settings, tmp_path):
    """The workers of ./run (cpu,gpu and usercode), whose test-runs get 10 s of wall clock each."""
    procs = start_celery_workers(settings, tmp_path / "worker.log", extra_env={"REWARD_TEST_RUN_TIME_LIMIT_S": "10"})
    yield procs[0]
    stop_celery_workers(procs)


@pytest.mark.slow
@pytest.mark.worker
def test_a_launch_and_a_ping_go_through_while_hostile_test_runs_hold_the_usercode_worker(
        workers_with_a_short_test_run_clock, project, engineer, admin_user, prompts_version, tiny_model, reward_spec,
        stop_runs):
    celery_worker_proc = workers_with_a_short_test_run_clock
    hostile = reward_function_create(project=project, user=engineer, name="hangs", source=NEVER_RETURNS)
    runs = [reward_test_run_create(function=hostile, user=user, dataset_version=prompts_version, limit=20)
            for user in (engineer, engineer, admin_user, admin_user)]  # 4 x 10 s of the usercode worker
    ids = [r.pk for r in runs]
    _wait(lambda: RewardTestRun.objects.filter(pk__in=ids, state=RewardTestRunState.RUNNING).exists(),
          "a hostile test-run starting", celery_worker_proc)

    from jobs.tasks import ping

    ping.apply_async(args=[project.pk], queue=CPU_QUEUE)
    job = job_create(project=project, user=engineer, kind="grpo", backend="local", preset="demo-cpu",
                     hp_overrides={"max_steps": 500}, dataset_version=prompts_version, reward_spec=reward_spec,
                     base_model=tiny_model)

    def cpu_work_done():
        job.refresh_from_db()
        return AuditLog.objects.filter(action="worker.ping", project=project).exists() and \
            job.state != JobState.QUEUED and job.attempts.exists()

    _wait(cpu_work_done, "the ping and the launch", celery_worker_proc)
    still_active = RewardTestRun.objects.filter(pk__in=ids, state__in=ACTIVE).count()
    assert still_active >= 1, "the hostile test-runs were over before the cpu queue's work ran: nothing was shown"
    assert job.state in (JobState.STARTING, JobState.RUNNING, JobState.SUCCEEDED), (job.state, job.error)

    # each hostile test-run stops at its wall clock and says why
    _wait(lambda: not RewardTestRun.objects.filter(pk__in=ids, state__in=ACTIVE).exists(),
          "the hostile test-runs ending", celery_worker_proc, timeout=600)
    for run in RewardTestRun.objects.filter(pk__in=ids):
        assert run.state in (RewardTestRunState.ERRORS, RewardTestRunState.FAILED), run.state
        errors = {r["error"] for r in run.results}
        assert any("REWARD_TEST_RUN_TIME_LIMIT_S" in (e or "") for e in errors) or "time" in run.error, errors


@pytest.mark.django_db
def test_a_project_may_have_only_so_many_test_runs_at_once(settings, project, engineer, admin_user, reward_fn,
                                                           prompts_version, monkeypatch):
    from webapp.rewards import scoring

    monkeypatch.setattr(scoring, "_enqueue", lambda run_id: None)  # they stay queued
    settings.REWARD_TEST_RUNS_PER_PROJECT = 3
    reviewer = Membership.objects.create(project=project, user=type(engineer).objects.create_user("ray"),
                                         role=Role.ENGINEER).user
    for user in (engineer, engineer, admin_user):
        reward_test_run_create(function=reward_fn, user=user, dataset_version=prompts_version, limit=2)
    with pytest.raises(ApplicationError, match="This project already has 3 test-runs queued or running"):
        reward_test_run_create(function=reward_fn, user=reviewer, dataset_version=prompts_version, limit=2)
