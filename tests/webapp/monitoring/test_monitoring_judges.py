"""Automatic judges on a human evaluation: request, the worker's subprocess, the result beside the humans."""
from __future__ import annotations

import pytest

from webapp.core import queue
from webapp.core.services import ApplicationError
from webapp.monitoring import selectors
from webapp.monitoring.models import EvaluationStatus, JudgeRun
from webapp.monitoring.services import human_eval_create, judge_choices, judge_request, judge_run
from webapp.registry.models import ModelEntry, ModelKind
from webapp.runs.models import RunEvent

pytestmark = pytest.mark.django_db


@pytest.fixture
def task(make_job, checkpoint, samples, engineer):
    job = make_job()
    ckpt = checkpoint(job, 10)
    samples(job, 10, [{"input": f"{i}+1=", "output": str(i + 1), "reference": str(i), "win": 1.0}
                      for i in range(6)])
    return human_eval_create(checkpoint=ckpt, user=engineer, limit=50, seed=1)


@pytest.fixture
def reward_model(project, tmp_path):
    from training.demo import DEMO_VOCAB
    from training.models import build_tiny_reward_model

    path = build_tiny_reward_model(tmp_path / "rm", vocab=DEMO_VOCAB, hidden=32, layers=1)
    return ModelEntry.objects.create(project=project, name="tiny-rm", kind=ModelKind.REWARD_MODEL, path=str(path))


def test_a_reward_model_judges_both_orders_on_the_worker(task, reward_model, engineer, monkeypatch,
                                                         django_capture_on_commit_callbacks):
    sent = []
    monkeypatch.setattr("webapp.monitoring.services.judges.enqueue", lambda name, *a, queue="cpu": sent.append(
        (name, *a)))
    assert (f"model:{reward_model.pk}", "tiny-rm (reward model)") in judge_choices(task)
    with django_capture_on_commit_callbacks(execute=True):
        run = judge_request(task=task, user=engineer, judge=f"model:{reward_model.pk}")
    assert sent == [(queue.RUN_JUDGE, run.pk)]
    with pytest.raises(ApplicationError, match="already judging these pairs"):
        judge_request(task=task, user=engineer, judge=f"model:{reward_model.pk}")
    run = judge_run(judge_run_id=run.pk)
    assert run.status == EvaluationStatus.SUCCEEDED, run.error
    assert run.wins + run.ties + run.losses == run.n == 6 and run.inconsistent == 0  # a scalar scorer
    assert run.win_rate_lo <= run.win_rate <= run.win_rate_hi
    assert "bootstrap 1000" in run.result["interval"]
    assert judge_run(judge_run_id=run.pk).pk == run.pk  # a redelivered task does nothing
    (mark,) = selectors.win_rate_marks(task.checkpoint.job)["judges"]
    assert (mark["step"], mark["label"], mark["n"]) == (10, "tiny-rm", 6) and mark["bias"] == 0.0
    assert RunEvent.objects.filter(kind="judge", job=task.checkpoint.job).exists()


def test_a_judge_that_cannot_run_fails_with_its_message(task, project, tmp_path, engineer, monkeypatch):
    monkeypatch.setattr("webapp.monitoring.services.judges.enqueue", lambda *a, **k: None)
    folder = tmp_path / "not-a-model"
    folder.mkdir()
    model = ModelEntry.objects.create(project=project, name="broken", kind=ModelKind.REWARD_MODEL, path=str(folder))
    run = judge_run(judge_run_id=judge_request(task=task, user=engineer, judge=f"model:{model.pk}").pk)
    assert run.status == EvaluationStatus.FAILED and "not an HF model folder" in run.error


def test_bad_judge_choices_are_refused(task, engineer, project, make_job):
    with pytest.raises(ApplicationError, match="no run reward"):
        judge_request(task=task, user=engineer, judge="reward")
    with pytest.raises(ApplicationError, match="Choose a judge"):
        judge_request(task=task, user=engineer, judge="oracle")
    with pytest.raises(ApplicationError, match="registered in this project"):
        judge_request(task=task, user=engineer, judge="model:99999")
    assert not JudgeRun.objects.exists()


def test_the_detail_page_shows_judges_beside_the_humans(task, reward_model, engineer, as_user, project,
                                                        monkeypatch):
    monkeypatch.setattr("webapp.monitoring.services.judges.enqueue", lambda *a, **k: None)
    client = as_user(engineer)
    url = f"/p/{project.slug}/monitor/human-evals/{task.pk}/"
    resp = client.post(url + "judge/", {"judge": f"model:{reward_model.pk}"}, follow=True)
    assert "is judging the pairs" in resp.content.decode()
    judge_run(judge_run_id=JudgeRun.objects.get().pk)
    page = client.get(url).content.decode()
    assert "Automatic judges" in page and "tiny-rm" in page and "positions swapped" in page
    resp = client.post(url + "judge/", {"judge": "nonsense"}, follow=True)
    assert resp.status_code == 200 and "Choose a judge" in resp.content.decode()


def test_an_arena_is_judged_from_side_bs_view_on_its_page(project, engineer, reward_model, as_user, monkeypatch):
    import json

    from webapp.monitoring.models import Arena, ArenaPair
    from webapp.monitoring.services.arena import arenas_dir

    monkeypatch.setattr("webapp.monitoring.services.judges.enqueue", lambda *a, **k: None)
    arena = Arena.objects.create(project=project, title="A vs B", status=EvaluationStatus.SUCCEEDED, progress=1.0,
                                 sides={"a": {"label": "step 10"}, "b": {"label": "step 20"}}, prompts=["1+1="] * 3,
                                 sampling={"max_new_tokens": 4, "temperature": 0.0, "top_p": 1.0})
    for i in range(3):
        ArenaPair.objects.create(arena=arena, index=i, prompt=f"{i}+1=", prompt_text=f"{i}+1=",
                                 response_a=f"{i + 5}", response_b=f"{i + 1}", seed=i)
    client = as_user(engineer)
    url = f"/p/{project.slug}/monitor/arenas/{arena.pk}/"
    page = client.get(url).content.decode()
    assert "Automatic judges" in page and f"model:{reward_model.pk}" in page
    resp = client.post(url + "auto-judge/", {"judge": f"model:{reward_model.pk}"}, follow=True)
    assert "is judging the pairs" in resp.content.decode()
    run = judge_run(judge_run_id=JudgeRun.objects.get(arena=arena).pk)
    assert run.status == EvaluationStatus.SUCCEEDED and run.n == 3, run.error
    sent = [json.loads(line) for line in
            (arenas_dir() / str(arena.pk) / "judges" / str(run.pk) / "pairs.jsonl").read_text().splitlines()]
    assert (sent[0]["a"], sent[0]["b"]) == ("1", "5")  # B's response is judged as the one whose wins count
    page = client.get(url).content.decode()
    assert "tiny-rm" in page and "are B's, against A" in page
    assert not RunEvent.objects.filter(kind="judge").exists()  # an arena has no run to log on


def test_the_runs_own_reward_judges_in_the_sandbox(launched_job, engineer, monkeypatch):
    """A launched run's pinned exact-match reward (job.json + reward/) scores both sides of each pair."""
    from webapp.monitoring.models import HumanEvalItem, HumanEvalTask
    from webapp.runs.models import Checkpoint

    monkeypatch.setattr("webapp.monitoring.services.judges.enqueue", lambda *a, **k: None)
    job = launched_job()
    ckpt = Checkpoint.objects.create(job=job, step=5, path=job.run_dir + "/checkpoints/global_step_5")
    task = HumanEvalTask.objects.create(project=job.project, checkpoint=ckpt, title="t", source="s", opponent="step 0",
                                        opponent_step=0)
    cases = [("3", "4", "3"), ("5", "5", "5"), ("7", "6", "6"), ("1", "2", "9")]  # win, tie, loss, tie (both wrong)
    for i, (policy, other, truth) in enumerate(cases):
        HumanEvalItem.objects.create(task=task, index=i, prompt=f"q{i}", policy_response=policy,
                                     reference_response=other, ground_truth=truth, policy_side="a")
    assert ("reward", f"The reward of run #{job.pk} (sandboxed)") in judge_choices(task)
    run = judge_run(judge_run_id=judge_request(task=task, user=engineer, judge="reward").pk)
    assert run.status == EvaluationStatus.SUCCEEDED, run.error
    assert (run.wins, run.ties, run.losses, run.n) == (1, 2, 1, 4) and run.win_rate == 0.5


def test_the_api_lists_and_starts_judges_by_role(task, reward_model, engineer, reviewer, outsider, api_for, project,
                                                 monkeypatch):
    monkeypatch.setattr("webapp.monitoring.services.judges.enqueue", lambda *a, **k: None)
    url = f"/api/projects/{project.slug}/monitor/human-evals/{task.pk}/judges/"
    assert api_for(outsider).get(url).status_code in (403, 404)
    assert api_for(reviewer).post(url, {"judge": f"model:{reward_model.pk}"}, format="json").status_code == 403
    resp = api_for(engineer).post(url, {"judge": f"model:{reward_model.pk}"}, format="json")
    assert resp.status_code == 202 and resp.json()["status"] == "queued"
    assert api_for(engineer).post(url, {"judge": "oracle"}, format="json").status_code == 400
    assert api_for(engineer).post(url, {}, format="json").status_code == 400
    listed = api_for(reviewer).get(url).json()
    assert [j["judge"] for j in listed["judges"]] == ["tiny-rm"] and listed["choices"] == []
    assert api_for(engineer).get(url).json()["choices"][0]["value"] == f"model:{reward_model.pk}"
    assert api_for(engineer).get("/api/schema/").status_code == 200


def test_pages_refuse_judging_below_engineer(task, reward_model, reviewer, as_user, project):
    resp = as_user(reviewer).post(f"/p/{project.slug}/monitor/human-evals/{task.pk}/judge/",
                                  {"judge": f"model:{reward_model.pk}"})
    assert resp.status_code == 403 and not JudgeRun.objects.exists()
