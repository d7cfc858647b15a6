"""Test-runs are queued for a worker (never scored in the web process), limited per user, and followed."""
from __future__ import annotations

import time
from datetime import timedelta

import pytest

from tests.conftest import start_celery_workers, stop_celery_workers
from tests.sandbox_gate import GATE_SOURCE, new_gate, open_gate
from webapp.rewards import scoring
from webapp.rewards.models import RewardTestRun

# The last sample (5+1) waits in the sandbox until the test has seen the partial count, so that the count is
# there to see however slowly the machine answers.
GATED = GATE_SOURCE + '''
import time
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    time.sleep(0.25)
    if str(ground_truth) == "6":
        _wait_at_gate("GATE")
    return 1.0 if str(solution_str).strip() == str(ground_truth).strip() else 0.0
'''


def _url(project, fn):
    return f"/api/projects/{project.slug}/rewards/{fn.pk}/test-run/"


@pytest.fixture
def queued(monkeypatch, real_queue):
    """What was handed to the queue; nothing runs it. The sandbox must not start in the request either."""
    sent: list[int] = []
    monkeypatch.setattr(scoring, "_enqueue", sent.append)

    def no_sandbox(*a, **kw):
        raise AssertionError("a test-run was scored in the web process")

    monkeypatch.setattr("training.sandbox.RewardSandbox", no_sandbox)
    return sent


def test_a_test_run_is_queued_not_scored_in_the_request(api_for, engineer, project, reward_fn, arith, queued,
                                                        django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        resp = api_for(engineer).post(_url(project, reward_fn), {"dataset_version": arith.pk, "limit": 3},
                                      format="json")
    assert resp.status_code == 202, resp.content
    body = resp.json()
    assert body["state"] == "queued" and body["results"] == [] and body["sample_count"] == 3
    assert queued == [body["id"]]
    assert body["api_url"] == f"/api/projects/{project.slug}/rewards/test-runs/{body['id']}/"


def test_a_user_may_have_two_test_runs_active_then_gets_a_clear_refusal(api_for, engineer, admin_user, project,
                                                                        reward_fn, arith, queued, settings):
    settings.REWARD_TEST_RUNS_PER_USER = 2
    api = api_for(engineer)
    for _ in range(2):
        assert api.post(_url(project, reward_fn), {"dataset_version": arith.pk}, format="json").status_code == 202
    refused = api.post(_url(project, reward_fn), {"dataset_version": arith.pk}, format="json")
    assert refused.status_code == 400
    assert refused.json()["detail"] == "You already have 2 test-runs queued or running; wait for one to finish."
    assert RewardTestRun.objects.filter(created_by=engineer).count() == 2
    # someone else is not held up by it
    assert api_for(admin_user).post(_url(project, reward_fn), {"dataset_version": arith.pk},
                                    format="json").status_code == 202
    # a finished run frees its slot; one whose worker was lost stops counting after a while
    first, second = RewardTestRun.objects.filter(created_by=engineer).order_by("pk")
    RewardTestRun.objects.filter(pk=first.pk).update(state="succeeded")
    RewardTestRun.objects.filter(pk=second.pk).update(created_at=second.created_at - timedelta(minutes=11))
    assert api.post(_url(project, reward_fn), {"dataset_version": arith.pk}, format="json").status_code == 202
    second.refresh_from_db()
    assert second.state == "failed" and "lost" in second.error


def test_the_form_without_javascript_redirects_to_the_queued_run(as_user, engineer, project, reward_fn, arith,
                                                                  queued, monkeypatch):
    resp = as_user(engineer).post(f"/p/{project.slug}/rewards/{reward_fn.pk}/test-run/",
                                  {"dataset_version": arith.pk, "limit": 2})
    run = RewardTestRun.objects.get()
    assert resp.status_code == 302 and resp["Location"].endswith(f"/rewards/test-runs/{run.pk}/")
    html = as_user(engineer).get(resp["Location"]).content.decode()
    assert "Queued for a worker" in html and "data-test-run-follow" in html and 'http-equiv="refresh"' in html
    monkeypatch.undo()  # now as the worker: the sandbox may start
    scoring.reward_test_run_execute(run_id=run.pk)
    html = as_user(engineer).get(resp["Location"]).content.decode()
    assert "Queued for a worker" not in html and "per-sample" in html


@pytest.fixture
def patient_worker(real_queue, transactional_db, tmp_path, settings):
    """Real workers whose test-runs may take as long as the test needs to look (the gate above holds one)."""
    procs = start_celery_workers(settings, tmp_path / "worker.log",
                                 extra_env={"REWARD_TEST_RUN_TIME_LIMIT_S": "600", "REWARD_TIME_LIMIT_S": "600"})
    yield procs[0]
    stop_celery_workers(procs)


def test_a_real_worker_scores_it_and_reports_progress(patient_worker, api_for, engineer, project, reward_fn, arith):
    api = api_for(engineer)
    gate = new_gate()
    resp = api.post(_url(project, reward_fn), {"source": GATED.replace("GATE", gate), "dataset_version": arith.pk,
                                               "limit": 6}, format="json")
    # a worker that is quick to take it may have started it before the response was written
    assert resp.status_code == 202 and resp.json()["state"] in ("queued", "running")
    seen, opened, deadline = [], False, time.monotonic() + 600  # the bound only guards against a hang
    while time.monotonic() < deadline:
        run = api.get(resp.json()["api_url"]).json()
        seen.append((run["state"], run["done_count"]))
        if run["state"] in ("succeeded", "errors", "failed"):
            break
        if not opened and run["state"] == "running" and 0 < run["done_count"] < 6:
            opened = open_gate(gate)
        time.sleep(0.1)
    assert run["state"] == "succeeded", (run, seen[-5:], patient_worker.log_path.read_text()[-3000:])
    assert [r["score"] for r in run["results"]] == [1.0] * 6 and run["done_count"] == 6
    assert any(state == "running" and 0 < done < 6 for state, done in seen), seen  # progress while it ran
