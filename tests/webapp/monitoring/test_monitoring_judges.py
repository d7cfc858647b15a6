"""Automatic judges on a blind task's pairs: request, the worker's subprocess, the result beside the humans; a judge
gets what the reward gets in training (ground truth, data source, extra info), says so when it told nothing apart,
and is offered only when it fits the pairs."""
from __future__ import annotations

from pathlib import Path

import pytest

from webapp.core import queue
from webapp.core.services import ApplicationError
from webapp.monitoring import selectors
from webapp.monitoring.models import BlindTask, EvaluationStatus, JudgeRun
from webapp.monitoring.services import human_eval_create, judge_choices, judge_request, judge_run
from webapp.monitoring.services.blind import new_pair
from webapp.registry.models import ModelEntry, ModelKind
from webapp.runs.models import RunEvent

pytestmark = pytest.mark.django_db


@pytest.fixture
def task(make_job, checkpoint, samples, engineer):
    job = make_job()
    ckpt = checkpoint(job, 10)
    samples(job, 10, [{"input": f"{i}+1=", "output": str(i + 1), "reference": str(i), "win": 1.0}
                      for i in range(6)])
    return human_eval_create(checkpoint=ckpt, user=engineer, limit=50)


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
    assert {"value": f"model:{reward_model.pk}", "label": "tiny-rm (reward model)", "problem": None} in \
        judge_choices(task)
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
    (mark,) = selectors.win_rate_marks(task.b_checkpoint.job)["judges"]
    assert (mark["step"], mark["label"], mark["n"]) == (10, "tiny-rm", 6) and mark["bias"] == 0.0
    assert RunEvent.objects.filter(kind="judge", job=task.b_checkpoint.job).exists()


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
    url = f"/p/{project.slug}/monitor/blind/{task.pk}/"
    resp = client.post(url + "auto-judge/", {"judge": f"model:{reward_model.pk}"}, follow=True)
    page = resp.content.decode()
    assert "is judging the pairs" in page and 'id="judges-live"' in page and 'data-finished="0"' in page
    judge_run(judge_run_id=JudgeRun.objects.get().pk)
    page = client.get(url).content.decode()
    assert "Automatic judges" in page and "tiny-rm" in page and "positions swapped" in page
    assert 'data-finished="1"' in page
    resp = client.post(url + "auto-judge/", {"judge": "nonsense"}, follow=True)
    assert resp.status_code == 200 and "Choose a judge" in resp.content.decode()


def test_an_arena_is_judged_from_side_bs_view_on_its_page(project, engineer, reward_model, as_user, monkeypatch):
    import json

    from tests.webapp.monitoring.test_blind import make_task
    from webapp.monitoring.services.judges import blind_dir

    monkeypatch.setattr("webapp.monitoring.services.judges.enqueue", lambda *a, **k: None)
    arena = make_task(project, responses=[(f"{i + 5}", f"{i + 1}") for i in range(3)],
                      sampling={"max_response_length": 4, "temperature": 0.0, "top_p": 1.0})
    client = as_user(engineer)
    url = f"/p/{project.slug}/monitor/blind/{arena.pk}/"
    page = client.get(url).content.decode()
    assert "Automatic judges" in page and f"model:{reward_model.pk}" in page
    resp = client.post(url + "auto-judge/", {"judge": f"model:{reward_model.pk}"}, follow=True)
    assert "is judging the pairs" in resp.content.decode()
    run = judge_run(judge_run_id=JudgeRun.objects.get(task=arena).pk)
    assert run.status == EvaluationStatus.SUCCEEDED and run.n == 3, run.error
    sent = [json.loads(line) for line in
            (blind_dir(arena) / "judges" / str(run.pk) / "pairs.jsonl").read_text().splitlines()]
    assert (sent[0]["a"], sent[0]["b"]) == ("1", "5")  # B's response is judged as the one whose wins count
    page = client.get(url).content.decode()
    assert "tiny-rm" in page and "are B's (step 20), against A (step 10)" in page
    assert not RunEvent.objects.filter(kind="judge").exists()  # an arena has no run to log on


def test_the_runs_own_reward_judges_in_the_sandbox(launched_job, engineer, monkeypatch):
    """A launched run's pinned exact-match reward (job.json + reward/) scores both sides of each pair."""
    from tests.webapp.monitoring.test_blind import make_task
    from webapp.runs.models import Checkpoint

    monkeypatch.setattr("webapp.monitoring.services.judges.enqueue", lambda *a, **k: None)
    job = launched_job()
    ckpt = Checkpoint.objects.create(job=job, step=5, path=job.run_dir + "/checkpoints/global_step_5")
    task = make_task(job.project, source="periodic", b_checkpoint=ckpt, responses=[])
    cases = [("3", "4", "3"), ("5", "5", "5"), ("7", "6", "6"), ("1", "2", "9")]  # win, tie, loss, tie (both wrong)
    for i, (policy, other, truth) in enumerate(cases):
        new_pair(task, i, response_a=other, response_b=policy, prompt_text=f"q{i}", ground_truth=truth).save()
    assert {"value": "reward", "label": f"The reward of run #{job.pk} (sandboxed)", "problem": None} in \
        judge_choices(task)
    run = judge_run(judge_run_id=judge_request(task=task, user=engineer, judge="reward").pk)
    assert run.status == EvaluationStatus.SUCCEEDED, run.error
    assert (run.wins, run.ties, run.losses, run.n) == (1, 2, 1, 4) and run.win_rate == 0.5


def test_the_api_lists_and_starts_judges_by_role(task, reward_model, engineer, reviewer, outsider, api_for, project,
                                                 monkeypatch):
    monkeypatch.setattr("webapp.monitoring.services.judges.enqueue", lambda *a, **k: None)
    url = f"/api/projects/{project.slug}/monitor/blind/{task.pk}/judges/"
    assert api_for(outsider).get(url).status_code in (403, 404)
    assert api_for(reviewer).post(url, {"judge": f"model:{reward_model.pk}"}, format="json").status_code == 403
    resp = api_for(engineer).post(url, {"judge": f"model:{reward_model.pk}"}, format="json")
    assert resp.status_code == 202 and resp.json()["status"] == "queued"
    assert api_for(engineer).post(url, {"judge": "oracle"}, format="json").status_code == 400
    assert api_for(engineer).post(url, {}, format="json").status_code == 400
    listed = api_for(reviewer).get(url).json()
    assert [j["judge"] for j in listed["judges"]] == ["tiny-rm"] and listed["choices"] == []
    assert (listed["status"], listed["finished"]) == ("queued", False)  # what the page's live follower reads
    assert api_for(engineer).get(url).json()["choices"][0]["value"] == f"model:{reward_model.pk}"
    assert api_for(engineer).get("/api/schema/").status_code == 200


def test_pages_refuse_judging_below_engineer(task, reward_model, reviewer, as_user, project):
    resp = as_user(reviewer).post(f"/p/{project.slug}/monitor/blind/{task.pk}/auto-judge/",
                                  {"judge": f"model:{reward_model.pk}"})
    assert resp.status_code == 403 and not JudgeRun.objects.exists()


def test_the_runs_reward_judges_an_arena_of_dataset_prompts_with_their_ground_truth(launched_job, engineer, as_user,
                                                                                   monkeypatch):
    """Issue: arena pairs kept no ground truth, so exact-match scored every response 0 and the judge said 0 / 20 / 0
    "50 %". Prompts taken from a dataset keep it (and data source, extra info), as in training."""
    from webapp.monitoring.models import BlindPair
    from webapp.monitoring.services.arena import arena_create, prompts_from_version
    from webapp.runs.models import Checkpoint

    monkeypatch.setattr("webapp.monitoring.services.judges.enqueue", lambda *a, **k: None)
    monkeypatch.setattr("webapp.monitoring.services.arena.enqueue", lambda *a, **k: None)
    job = launched_job()
    project = job.project
    c1, c2 = (Checkpoint.objects.create(job=job, step=s, path=f"{job.run_dir}/checkpoints/global_step_{s}")
              for s in (1, 2))
    for c in (c1, c2):
        (Path(c.path) / "model").mkdir(parents=True)
    prompts = prompts_from_version(project, job.dataset_version, "val", 6)
    assert all(p["ground_truth"] and p["data_source"] for p in prompts)
    arena = arena_create(project=project, user=engineer, side_a=f"ckpt:{c1.pk}", side_b=f"ckpt:{c2.pk}",
                         prompts=prompts, seed=1)
    # as generation leaves it: B answers the first four right, A the first two; the last two both wrong
    truths = [p["ground_truth"] for p in prompts]
    answers = [(t if i < 2 else "x", t if i < 4 else "y") for i, t in enumerate(truths)]
    for i, (row, (a, b)) in enumerate(zip(arena.prompts, answers, strict=True)):
        new_pair(arena, i, response_a=a, response_b=b, prompt=row["prompt"], prompt_text=row["prompt"],
                 ground_truth=row["ground_truth"], data_source=row["data_source"], extra_info=row["extra_info"]).save()
    BlindTask.objects.filter(pk=arena.pk).update(status=EvaluationStatus.SUCCEEDED)
    arena.refresh_from_db()
    run = judge_run(judge_run_id=judge_request(task=arena, user=engineer, judge="reward").pk)
    assert run.status == EvaluationStatus.SUCCEEDED, run.error
    assert (run.wins, run.ties, run.losses) == (2, 4, 0) and not run.result["all_scores_equal"]
    # pairs without a ground truth: exact-match scores every response alike, and the page says so
    BlindPair.objects.filter(task=arena).update(ground_truth=None)
    choice = next(c for c in judge_choices(arena) if c["value"] == "reward")
    assert "carry no ground truth" in choice["label"]
    run = judge_run(judge_run_id=judge_request(task=arena, user=engineer, judge="reward").pk)
    assert (run.wins, run.ties, run.losses) == (0, 6, 0) and run.result["all_scores_equal"]
    page = as_user(engineer).get(f"/p/{project.slug}/monitor/blind/{arena.pk}/").content.decode()
    assert page.count("data-all-equal") == 1 and "Every response got the same score (0" in page
    assert "told nothing apart here" in page


def test_a_judge_model_whose_context_is_too_short_is_not_offered(task, project, engineer, tmp_path, as_user):
    """demo-teacher reads 32 tokens: it was offered for these pairs and then failed on the worker."""
    from training.demo import DEMO_VOCAB
    from training.models import build_tiny_model

    short = build_tiny_model(tmp_path / "short", vocab=DEMO_VOCAB, hidden=32, layers=1, max_positions=32)
    roomy = build_tiny_model(tmp_path / "roomy", vocab=DEMO_VOCAB, hidden=32, layers=1, max_positions=2048)
    bad = ModelEntry.objects.create(project=project, name="teacher-32", kind=ModelKind.CAUSAL_LM, path=str(short))
    good = ModelEntry.objects.create(project=project, name="roomy", kind=ModelKind.CAUSAL_LM, path=str(roomy))
    choices = {c["value"]: c for c in judge_choices(task)}
    assert "reads at most 32 tokens" in choices[f"model:{bad.pk}"]["problem"]
    assert choices[f"model:{good.pk}"]["problem"] is None
    with pytest.raises(ApplicationError, match="teacher-32 cannot judge these pairs: .* reads at most 32 tokens"):
        judge_request(task=task, user=engineer, judge=f"model:{bad.pk}")
    page = as_user(engineer).get(f"/p/{project.slug}/monitor/blind/{task.pk}/").content.decode()
    option = page.split(f'value="model:{bad.pk}"')[1].split("</option>")[0]
    assert "disabled" in option and "does not fit these pairs" in option
    assert "Not offered: teacher-32 reads at most 32 tokens" in page
