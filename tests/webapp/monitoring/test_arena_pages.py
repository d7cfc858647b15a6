"""Arena pages, API and command: form errors, blind judging through the API, results wording (once closed), export,
access per role and per project. Pairs are stored directly here (generation is tested in test_arena.py)."""
from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from tests.webapp.monitoring.test_blind import make_task, press
from webapp.core.models import Project
from webapp.monitoring.models import BlindTask, BlindVerdict, EvaluationStatus
from webapp.monitoring.services.blind import new_pair, task_set_open, verdict_record
from webapp.registry.models import ModelEntry, ModelKind

pytestmark = pytest.mark.django_db


@pytest.fixture
def sides(make_job, checkpoint, project):
    job = make_job(name="demo")
    c10, c20 = checkpoint(job, 10), checkpoint(job, 20)
    return {"a": f"ckpt:{c10.pk}", "b": f"ckpt:{c20.pk}", "job": job}


@pytest.fixture
def ready(project, engineer):
    """A generated arena of 4 pairs (B answers right, A wrong), as the worker leaves it."""
    return make_task(project, engine="transformers", created_by=engineer,
                     sampling={"max_response_length": 4, "temperature": 0.7, "top_p": 1.0},
                     sides={"a": {"kind": "checkpoint", "label": "Run #1 demo · step 10", "step": 10},
                            "b": {"kind": "checkpoint", "label": "Run #1 demo · step 20", "step": 20}},
                     prompts=[{"prompt": f"{i}+1="} for i in range(4)])


def test_the_form_starts_an_arena_on_a_worker_and_shows_errors_in_place(
        sides, engineer, as_user, project, monkeypatch, django_capture_on_commit_callbacks):
    sent = []
    monkeypatch.setattr("webapp.monitoring.services.arena.enqueue", lambda *a, **k: sent.append((a, k)))
    client = as_user(engineer)
    url = f"/p/{project.slug}/monitor/arenas/"
    page = client.get(url).content.decode()
    assert "New arena" in page and "Run #" in page and 'aria-current="page">Arena<' in page
    base = {"side_a": sides["a"], "side_b": sides["b"], "source": "typed", "max_response_length": 4,
            "temperature": 0.7, "top_p": 1.0, "split": "val", "limit": 20}
    r = client.post(url, {**base, "prompts": "  \n"})
    assert r.status_code == 200 and "at least one prompt" in r.content.decode()
    r = client.post(url, {**base, "prompts": "1+1=\n2+2=", "top_p": 2})
    assert "Top-p" in r.content.decode() and BlindTask.objects.count() == 0
    with django_capture_on_commit_callbacks(execute=True):
        r = client.post(url, {**base, "prompts": "1+1=\n2+2=", "seed": 5})
    arena = BlindTask.objects.get()
    assert r.status_code == 302 and r.url.endswith(f"/monitor/blind/{arena.pk}/")
    assert [p["prompt"] for p in arena.prompts] == ["1+1=", "2+2="] and arena.seed == 5 and arena.status == "queued"
    assert sent == [(("jobs.tasks.generate_arena", arena.pk), {"queue": "cpu"})]
    detail = client.get(r.url).content.decode()
    assert "Waiting for a worker" in detail and 'id="blind-progress"' in detail and "js/blind.js" in detail


def test_viewers_see_but_cannot_start_judge_or_export(ready, viewer, as_user, api_for, project, outsider):
    client = as_user(viewer)
    assert "New arena" not in client.get(f"/p/{project.slug}/monitor/arenas/").content.decode()
    assert client.post(f"/p/{project.slug}/monitor/arenas/", {}).status_code == 403
    assert client.get(f"/p/{project.slug}/monitor/blind/{ready.pk}/judge/").status_code == 403
    assert client.post(f"/p/{project.slug}/monitor/blind/{ready.pk}/export/").status_code == 403
    api = api_for(viewer)
    pair = ready.pairs.first()
    r = api.post(f"/api/projects/{project.slug}/monitor/blind/{ready.pk}/verdicts/",
                 {"pair": pair.pk, "choice": "left"}, format="json")
    assert r.status_code == 403
    assert as_user(outsider).get(f"/p/{project.slug}/monitor/blind/{ready.pk}/").status_code == 404
    other = Project.objects.create(slug="other", name="Other")
    assert as_user(viewer).get(f"/p/{other.slug}/monitor/blind/{ready.pk}/").status_code in (403, 404)


def test_judging_blind_through_the_api_then_results_and_export(ready, reviewer, engineer, as_user, api_for, project):
    screen = as_user(reviewer).get(f"/p/{project.slug}/monitor/blind/{ready.pk}/judge/").content.decode()
    assert "step 10" not in screen and "step 20" not in screen  # blind: no labels
    assert 'data-keys="4 b"' in screen and "Both bad" in screen
    api = api_for(reviewer)
    url = f"/api/projects/{project.slug}/monitor/blind/{ready.pk}/verdicts/"
    pairs = list(ready.pairs.all())
    for p in pairs[:3]:  # B (the right sums) wherever it was shown
        assert api.post(url, {"pair": p.pk, "choice": press(p, reviewer, "b")}, format="json").status_code == 201
    r = api.post(url, {"pair": pairs[3].pk, "choice": "both_bad"}, format="json")
    assert r.json() == {"saved": True, "next": None, "closed": False}
    assert api.post(url, {"pair": pairs[0].pk, "choice": "a"}, format="json").status_code == 400
    assert [j.choice for j in BlindVerdict.objects.order_by("pair__index")] == ["b", "b", "b", "both_bad"]
    status = api_for(engineer).get(f"/api/projects/{project.slug}/monitor/blind/{ready.pk}/").json()
    assert "results" not in status and status["progress_counts"]["judged_pairs"] == 4  # open: blind
    page = as_user(engineer).get(f"/p/{project.slug}/monitor/blind/{ready.pk}/").content.decode()
    assert 'id="arena-pairs"' not in page and "once the task is closed" in page and "Close the arena first" in page
    r = api_for(engineer).post(f"/api/projects/{project.slug}/monitor/blind/{ready.pk}/open/", {"is_open": False},
                               format="json")
    res = r.json()["results"]
    assert res["outcome"]["b"]["count"] == 3 and res["outcome"]["both_bad"]["count"] == 1
    assert res["outcome"]["a"]["count"] == 0 and res["too_few"] and "path" not in r.json()["sides"]["a"]
    assert res["b"] == {**res["b"], "wins": 3, "ties": 1, "losses": 0, "n": 4, "too_few": True}
    page = as_user(engineer).get(f"/p/{project.slug}/monitor/blind/{ready.pk}/").content.decode()
    assert "a pair of identical responses each count as half a win" in page and "Too few judgements" in page
    assert "are not exported" in page and "3 judgements prefer one side" in page
    closed = as_user(reviewer).get(f"/p/{project.slug}/monitor/blind/{ready.pk}/").content.decode()
    assert 'id="arena-pairs"' in closed and "rita: b is better" in closed
    r = api_for(engineer).post(f"/api/projects/{project.slug}/monitor/blind/{ready.pk}/export/",
                               {"name": "arena-prefs", "split": "1"}, format="json")
    assert r.status_code == 201 and r.json()["rows"] == 3 and r.json()["version"] == 1
    r = as_user(engineer).post(f"/p/{project.slug}/monitor/blind/{ready.pk}/export/", {"name": "arena-prefs",
                                                                                      "split": "1"})
    assert r.status_code == 302 and r.url.endswith("/v2/")


def test_export_with_nothing_decisive_says_why(ready, reviewer, engineer, as_user, project):
    verdict_record(pair=ready.pairs.first(), reviewer=reviewer, choice="tie")
    task_set_open(task=ready, user=engineer, is_open=False)
    r = as_user(engineer).post(f"/p/{project.slug}/monitor/blind/{ready.pk}/export/", follow=True)
    assert "ties and “both bad” are not exported" in r.content.decode()


def test_the_command_creates_follows_and_exports(sides, ready, engineer, reviewer, project, capsys, monkeypatch):
    monkeypatch.setattr("webapp.monitoring.services.arena.enqueue", lambda *a, **k: None)
    job = sides["job"]
    call_command("arena", "create", project.slug, "--a", f"{job.pk}@10", "--b", sides["b"], "--prompt", "1+1=",
                 "--seed", "3", "--user", engineer.username)
    assert "Arena #" in capsys.readouterr().out and BlindTask.objects.filter(seed=3).exists()
    with pytest.raises(CommandError, match="no checkpoint at step 99"):
        call_command("arena", "create", project.slug, "--a", f"{job.pk}@99", "--b", sides["b"], "--prompt", "x")
    with pytest.raises(CommandError, match="not an engineer"):
        call_command("arena", "export", str(ready.pk), "--user", reviewer.username)
    for p in ready.pairs.all():
        verdict_record(pair=p, reviewer=reviewer, choice=press(p, reviewer, "a"))
    call_command("arena", "status", str(ready.pk))
    out = capsys.readouterr().out
    assert "4 of 4 pairs judged so far" in out and "A wins" not in out  # open: blind
    with pytest.raises(CommandError, match="not an engineer"):
        call_command("arena", "close", str(ready.pk), "--user", reviewer.username)
    call_command("arena", "close", str(ready.pk), "--user", engineer.username)
    call_command("arena", "status", str(ready.pk))
    out = capsys.readouterr().out
    assert "4 of 4 pairs judged" in out and "A wins 4" in out
    call_command("arena", "status", str(ready.pk), "--json")
    assert json.loads(capsys.readouterr().out)["results"]["outcome"]["a"]["count"] == 4
    call_command("arena", "export", str(ready.pk), "--split", "1", "--user", engineer.username)
    assert "Exported 4 preference pairs" in capsys.readouterr().out


def test_registered_models_are_sides_and_reward_models_are_not(project, engineer, sides):
    from webapp.monitoring.services.arena import side_choices

    lm = ModelEntry.objects.create(project=project, name="base", kind=ModelKind.CAUSAL_LM, path="/models/base")
    rm = ModelEntry.objects.create(project=project, name="rm", kind=ModelKind.REWARD_MODEL, path="/models/rm")
    values = [v for v, _ in side_choices(project)]
    assert f"model:{lm.pk}" in values and f"model:{rm.pk}" not in values


def test_prompts_from_a_dataset_version_split_and_limit(sides, engineer, as_user, project, monkeypatch, tiny_model_dir):
    from tests.webapp.monitoring.conftest import job_inputs

    monkeypatch.setattr("webapp.monitoring.services.arena.enqueue", lambda *a, **k: None)
    version = job_inputs(project, tiny_model_dir)["dataset_version"]
    client = as_user(engineer)
    base = {"side_a": sides["a"], "side_b": sides["b"], "source": "dataset", "max_response_length": 4, "temperature": 0,
            "top_p": 1.0, "dataset_version": version.pk, "split": "val", "limit": 4}
    r = client.post(f"/p/{project.slug}/monitor/arenas/", base)
    assert r.status_code == 302
    arena = BlindTask.objects.get()
    val = list(version.rows.filter(split="val").order_by("index")[:4])
    # the rows keep what the reward gets in training: ground truth, data source, extra info
    assert arena.prompts == [{"prompt": r.prompt, "ground_truth": r.ground_truth, "data_source": r.data_source,
                              "extra_info": r.extra_info} for r in val]
    assert arena.prompts[0]["ground_truth"] and arena.dataset_version_id == version.pk
    assert arena.sampling["temperature"] == 0
    r = client.post(f"/p/{project.slug}/monitor/arenas/", {**base, "dataset_version": ""})
    assert r.status_code == 200 and "Choose a dataset version" in r.content.decode()


def test_chat_prompts_export_as_conversational_pairs(project, engineer, reviewer):
    from webapp.datasets.models import DatasetRow
    from webapp.monitoring.services.arena_export import arena_export

    chat = [{"role": "system", "content": "Add."}, {"role": "user", "content": "2+2="}]
    arena = BlindTask.objects.create(project=project, source="arena", title="chat", status=EvaluationStatus.SUCCEEDED,
                                     seed=1, sides={"a": {"label": "A"}, "b": {"label": "B"}},
                                     prompts=[{"prompt": chat}], anyone_may_judge=True)
    pair = new_pair(arena, 0, prompt=chat, prompt_text="user: 2+2=", response_a="5", response_b="4", seed=1)
    pair.save()
    verdict_record(pair=pair, reviewer=reviewer, choice=press(pair, reviewer, "b"))
    task_set_open(task=arena, user=engineer, is_open=False)
    version = arena_export(arena=arena, user=engineer, split="0")
    row = DatasetRow.objects.get(version=version)
    assert row.prompt == chat and row.chosen == [{"role": "assistant", "content": "4"}]
    assert row.rejected == [{"role": "assistant", "content": "5"}]


def test_a_side_that_is_no_model_fails_with_a_reason_and_no_pairs(project, engineer, tmp_path):
    from webapp.monitoring.services.arena import arena_create, arena_generate

    (tmp_path / "empty").mkdir()
    a = ModelEntry.objects.create(project=project, name="empty", kind=ModelKind.CAUSAL_LM, path=str(tmp_path / "empty"))
    b = ModelEntry.objects.create(project=project, name="also-empty", kind=ModelKind.CAUSAL_LM,
                                  path=str(tmp_path / "empty"))
    arena = arena_create(project=project, user=engineer, side_a=f"model:{a.pk}", side_b=f"model:{b.pk}",
                         prompts=["1+1="])
    arena = arena_generate(arena_id=arena.pk)
    assert arena.status == "failed" and "not an HF model folder" in arena.error and arena.pairs.count() == 0


def test_the_api_starts_an_arena_and_refuses_bad_input(sides, engineer, reviewer, api_for, project, monkeypatch):
    monkeypatch.setattr("webapp.monitoring.services.arena.enqueue", lambda *a, **k: None)
    url = f"/api/projects/{project.slug}/monitor/arenas/"
    body = {"side_a": sides["a"], "side_b": sides["b"], "prompts": ["1+1=", [{"role": "user", "content": "2+2="}]],
            "sampling": {"max_response_length": 8, "temperature": 0.5}, "seed": 9}
    assert api_for(reviewer).post(url, body, format="json").status_code == 403
    r = api_for(engineer).post(url, body, format="json")
    assert r.status_code == 201 and r.json()["seed"] == 9 and r.json()["status"] == "queued"
    assert BlindTask.objects.get(pk=r.json()["id"]).prompts[1]["prompt"] == [{"role": "user", "content": "2+2="}]
    bad = api_for(engineer).post(url, {**body, "sampling": {"max_response_length": 0}}, format="json")
    assert bad.status_code == 400 and bad.json()["field"] == "max_response_length"
    old_name = api_for(engineer).post(url, {**body, "sampling": {"max_new_tokens": 8}}, format="json")
    assert old_name.status_code == 400 and "max_response_length" in old_name.json()["detail"]
    assert api_for(engineer).post(url, {"side_a": sides["a"]}, format="json").status_code == 400
    listed = api_for(reviewer).get(url).json()["arenas"]
    assert listed[0]["source"] == "arena" and listed[0]["anyone_may_judge"]
    assert [a["id"] for a in listed] == [r.json()["id"]] and "path" not in listed[0]["sides"]["a"]


def test_the_checkpoint_table_links_to_the_arena_with_the_run_s_checkpoints_chosen(sides, engineer, as_user, project):
    job = sides["job"]
    table = as_user(engineer).get(f"/p/{project.slug}/monitor/jobs/{job.pk}/checkpoints/").content.decode()
    assert f"/monitor/arenas/?job={job.pk}" in table
    page = as_user(engineer).get(f"/p/{project.slug}/monitor/arenas/?job={job.pk}").content.decode()
    a = page.split('name="side_a"')[1].split("</select>")[0]
    b = page.split('name="side_b"')[1].split("</select>")[0]
    assert f'value="{sides["a"]}" selected' in a and f'value="{sides["b"]}" selected' in b


def test_export_of_only_agreeing_judgements_leaves_out_contradictions(ready, reviewer, reviewer2, engineer, as_user,
                                                                      project):
    from webapp.monitoring.services.arena_export import arena_export, export_rows

    def pick(pair, user, side):
        verdict_record(pair=pair, reviewer=user, choice=press(pair, user, side))

    p0, p1, p2 = list(ready.pairs.all())[:3]
    pick(p0, reviewer, "b")
    pick(p0, reviewer2, "a")  # an even split: a tie, neither exported when agreeing only
    pick(p1, reviewer, "b")
    pick(p1, reviewer2, "b")
    pick(p2, reviewer, "b")
    assert len(export_rows(ready)[0]) == 5
    rows, skipped = export_rows(ready, agreed_only=True)
    assert len(rows) == 3 and skipped["disagreed"] == 2
    assert {(r["extra_info"]["pair"], r["extra_info"]["reviewer"]) for r in rows} == {(1, "rita"), (1, "rob"),
                                                                                       (2, "rita")}
    task_set_open(task=ready, user=engineer, is_open=False)
    page = as_user(engineer).get(f"/p/{project.slug}/monitor/blind/{ready.pk}/").content.decode()
    assert "2 of them disagree with their pair's majority" in page
    r = as_user(engineer).post(f"/p/{project.slug}/monitor/blind/{ready.pk}/export/",
                               {"split": "0", "agreed_only": "on"})
    assert r.status_code == 302
    assert arena_export(arena=ready, user=engineer, split="0").row_count == 5
    from webapp.datasets.models import DatasetVersion

    assert list(DatasetVersion.objects.order_by("number").values_list("row_count", flat=True)) == [3, 5]


def test_a_failed_or_stalled_arena_can_be_generated_again(ready, engineer, as_user, project, monkeypatch,
                                                          django_capture_on_commit_callbacks):
    from datetime import timedelta

    from django.utils import timezone

    sent = []
    monkeypatch.setattr("webapp.monitoring.services.arena.enqueue", lambda *a, **k: sent.append(a))
    client = as_user(engineer)
    url = f"/p/{project.slug}/monitor/blind/{ready.pk}/retry/"
    r = client.post(url, follow=True)
    assert "Only a failed or stalled arena" in r.content.decode() and ready.pairs.count() == 4
    BlindTask.objects.filter(pk=ready.pk).update(status="failed", error="CUDA out of memory")
    page = client.get(f"/p/{project.slug}/monitor/blind/{ready.pk}/").content.decode()
    assert "The generation failed: CUDA out of memory" in page and "Generate again" in page
    with django_capture_on_commit_callbacks(execute=True):
        client.post(url)
    ready.refresh_from_db()
    assert ready.status == "queued" and not ready.error and ready.pairs.count() == 0 and ready.seed == 7
    assert sent == [("jobs.tasks.generate_arena", ready.pk)]
    BlindTask.objects.filter(pk=ready.pk).update(status="running", started_at=timezone.now() - timedelta(hours=2))
    page = client.get(f"/p/{project.slug}/monitor/blind/{ready.pk}/").content.decode()
    assert "stalled" in page and 'id="blind-progress"' not in page
