"""Honest test-runs: samples that raised say "N errors" (not succeeded); a prompt set without responses is a
reference check and offers real responses instead: a run's stored rollouts or a registered model's answers."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.conf import settings

from training.rundir import RunDir
from webapp.core.services import ApplicationError
from webapp.rewards.models import RewardTestRunState
from webapp.rewards.scoring import reward_test_run_create

pytestmark = pytest.mark.django_db

INT_MATCH = '''\
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return float(int(solution_str) == int(ground_truth))
'''


def test_a_run_whose_samples_raised_says_n_errors(as_user, project, engineer, reward_fn, arith):
    run = reward_test_run_create(function=reward_fn, user=engineer, source=INT_MATCH, dataset_version=arith,
                                 responses_text="3\nfour\nfive")
    assert run.state == RewardTestRunState.ERRORS and run.error_count == 2 and run.state_words == "2 errors"
    html = as_user(engineer).get(f"/p/{project.slug}/rewards/test-runs/{run.pk}/").content.decode()
    assert ">2 errors</span>" in html and "2 of 3 samples raised or timed out" in html
    assert ">succeeded<" not in html
    html = as_user(engineer).get(f"/p/{project.slug}/rewards/{reward_fn.pk}/").content.decode()
    assert ">2 errors</span>" in html  # the recent test-runs list
    ok = reward_test_run_create(function=reward_fn, user=engineer, source=INT_MATCH, dataset_version=arith,
                                responses_text="3\n4")
    assert ok.state == RewardTestRunState.SUCCEEDED and ok.state_words == "succeeded"


def test_api_reports_state_words(api_for, project, engineer, reward_fn, arith):
    resp = api_for(engineer).post(f"/api/projects/{project.slug}/rewards/{reward_fn.pk}/test-run/",
                                  {"source": INT_MATCH, "dataset_version": arith.pk, "responses": "x"}, format="json")
    body = api_for(engineer).get(resp.json()["api_url"]).json()
    assert (body["state"], body["state_words"], body["error_count"]) == ("errors", "1 error", 1)


def test_a_prompt_set_without_responses_is_a_reference_check(as_user, project, engineer, reward_fn, arith,
                                                            dataset_factory):
    run = reward_test_run_create(function=reward_fn, user=engineer, dataset_version=arith, limit=3)
    assert run.state == RewardTestRunState.SUCCEEDED and run.is_reference_check
    html = as_user(engineer).get(f"/p/{project.slug}/rewards/test-runs/{run.pk}/").content.decode()
    assert "reference check</span>" in html and "ground truth was scored against itself" in html
    assert 'data-offer="rollouts"' in html and 'data-offer="model"' in html
    # a prompt set WITH reference responses scores those: no reference-check notice
    refs = dataset_factory("refs", "prompts", [{"prompt": "1+1=", "chosen": "2", "ground_truth": "2"}])
    run = reward_test_run_create(function=reward_fn, user=engineer, dataset_version=refs)
    assert not run.is_reference_check
    assert "ground truth was scored against itself" not in \
        as_user(engineer).get(f"/p/{project.slug}/rewards/test-runs/{run.pk}/").content.decode()


def _job_with_rollouts(project, engineer, rows_by_step: dict[int, list[dict]]):
    from webapp.runs.models import Job, JobState

    job = Job.objects.create(project=project, name="grpo demo", kind="grpo", state=JobState.SUCCEEDED,
                             created_by=engineer)
    run_dir = Path(settings.RUNS_ROOT) / project.slug / f"{job.pk}-abc"
    for step, rows in rows_by_step.items():
        path = RunDir(run_dir).samples("rollout", step)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    Job.objects.filter(pk=job.pk).update(run_dir=str(run_dir))
    return job


def test_score_the_stored_rollouts_of_a_run(as_user, project, engineer, reward_fn, django_user_model):
    rows = [{"input": "1+2=", "output": "3", "gts": "3", "score": 1.0, "step": 4, "uid": "a"},
            {"input": "1+2=", "output": "4", "gts": "3", "score": 0.0, "step": 4, "uid": "a"},
            {"input": "2+2=", "output": " 4", "gts": "4", "score": 1.0, "step": 4, "uid": "b"}]
    job = _job_with_rollouts(project, engineer, {2: rows[:1], 4: rows})
    run = reward_test_run_create(function=reward_fn, user=engineer, rollout_job_id=job.pk)  # latest step
    assert run.mode == "rollouts" and run.origin == f"run #{job.pk} grpo, rollouts of step 4"  # the job's row
    assert [r["score"] for r in run.results] == [1.0, 0.0, 1.0]
    assert [r["stored_score"] for r in run.results] == [1.0, 0.0, 1.0]
    assert run.results[0]["prompt"] == "1+2=" and not run.is_reference_check
    html = as_user(engineer).get(f"/p/{project.slug}/rewards/test-runs/{run.pk}/").content.decode()
    assert "Score in training" in html and "rollouts of step 4" in html
    run = reward_test_run_create(function=reward_fn, user=engineer, rollout_job_id=job.pk, rollout_step=2)
    assert run.sample_count == 1
    with pytest.raises(ApplicationError, match="no rollouts of step 3; steps with rollouts: 2–4"):
        reward_test_run_create(function=reward_fn, user=engineer, rollout_job_id=job.pk, rollout_step=3)
    # another project's run is not found here
    from webapp.core.models import Project

    other = Project.objects.create(slug="other", name="Other")
    foreign = _job_with_rollouts(other, engineer, {1: rows})
    with pytest.raises(ApplicationError, match=f"No run #{foreign.pk}"):
        reward_test_run_create(function=reward_fn, user=engineer, rollout_job_id=foreign.pk)
    page = as_user(engineer).get(f"/p/{project.slug}/rewards/{reward_fn.pk}/?source=rollouts").content.decode()
    assert f"#{job.pk} grpo · rollouts of steps 2–4" in page and f"#{foreign.pk} " not in page


def test_score_responses_sampled_from_a_registered_model(project, engineer, reward_fn, arith, tmp_path):
    from training.demo import DEMO_VOCAB
    from training.models import build_tiny_model
    from webapp.registry.models import ModelEntry, ModelKind

    path = build_tiny_model(tmp_path / "tiny", vocab=DEMO_VOCAB, hidden=32, layers=1, max_positions=32)
    model = ModelEntry.objects.create(project=project, name="tiny", kind=ModelKind.CAUSAL_LM, path=str(path))
    with pytest.raises(ApplicationError, match="prompt set"):
        reward_test_run_create(function=reward_fn, user=engineer, sample_model_id=model.pk)
    run = reward_test_run_create(function=reward_fn, user=engineer, sample_model_id=model.pk, dataset_version=arith,
                                 limit=2)
    assert run.mode == "model" and run.state == RewardTestRunState.SUCCEEDED
    assert run.origin.startswith("2 responses sampled from tiny") and len(run.results) == 2
    assert all(r["role"] == "sampled" and r["ground_truth"] == g for r, g in zip(run.results, ["3", "4"], strict=True))
    assert all(r["score"] in (0.0, 1.0) for r in run.results)  # the model's own text, scored
    with pytest.raises(ApplicationError, match="No causal LM"):
        reward_test_run_create(function=reward_fn, user=engineer, sample_model_id=model.pk + 99,
                               dataset_version=arith)


def test_api_scores_stored_rollouts_and_refuses_a_missing_run(api_for, project, engineer, reward_fn):
    job = _job_with_rollouts(project, engineer, {7: [{"input": "1+1=", "output": "2", "gts": "2", "score": 1.0}]})
    url = f"/api/projects/{project.slug}/rewards/{reward_fn.pk}/test-run/"
    resp = api_for(engineer).post(url, {"rollout_run": job.pk, "rollout_step": 7}, format="json")
    assert resp.status_code == 202, resp.json()
    body = api_for(engineer).get(resp.json()["api_url"]).json()
    assert (body["mode"], body["rollout_run"], body["rollout_step"], body["state"]) == ("rollouts", job.pk, 7,
                                                                                       "succeeded")
    assert body["results"][0]["stored_score"] == 1.0 and body["is_reference_check"] is False
    resp = api_for(engineer).post(url, {"rollout_run": job.pk + 50}, format="json")
    assert resp.status_code == 400 and resp.json()["field"] == "rollout_run"


def test_cli_says_reference_check_counts_errors_and_scores_rollouts(tmp_path, project, engineer, arith):
    from io import StringIO

    from django.core.management import CommandError, call_command

    def check(*args) -> dict:
        out = StringIO()
        call_command("reward_check", str(reward), *args, stdout=out)
        return json.loads(out.getvalue())

    reward = tmp_path / "int_match.py"
    reward.write_text(INT_MATCH)
    out = check("--dataset", "arith", "--project", "acme", "--limit", "2")
    assert out["reference_check"] is True and out["errors"] == 0
    responses = tmp_path / "r.txt"
    responses.write_text("3\nfour\n")
    out = check("--dataset", "arith", "--project", "acme", "--responses", str(responses))
    assert out["reference_check"] is False and out["errors"] == 1
    job = _job_with_rollouts(project, engineer, {5: [{"input": "1+1=", "output": "2", "gts": "2", "score": 1.0},
                                                     {"input": "1+2=", "output": "4", "gts": "3", "score": 0.0}]})
    out = check("--project", "acme", "--rollouts", f"{job.pk}@5")
    assert out["mode"] == "rollouts" and [r["score"] for r in out["results"]] == [1.0, 0.0]
    assert out["origin"] == f"run #{job.pk} grpo, rollouts of step 5"
    with pytest.raises(CommandError, match="need --project"):
        check("--rollouts", str(job.pk))
    with pytest.raises(CommandError, match="no rollouts of step 6"):
        check("--project", "acme", "--rollouts", f"{job.pk}@6")
