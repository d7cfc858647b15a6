"""Blind judging in Chromium, as the audit and the new-user walk found it: a reviewer's results stay hidden until
the task closes, identical answers are ties nobody is asked to judge, a task assigned to one reviewer refuses an
unassigned admin until an engineer opens it to anyone, and automatic judges are offered only when they fit, follow
the worker live, get the prompts' ground truth, and say so when they scored everything alike."""
from __future__ import annotations

import re

import pytest

from tests.browser.browser_helpers import PASSWORD, seed_project
from tests.browser_support import login
from tests.webapp.monitoring.test_blind import make_task

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _as(page, live_server, user):
    page.context.clear_cookies()
    user.set_password(PASSWORD)
    user.save()
    login(page, live_server, user.username, PASSWORD)


def _next_pair_ready(page) -> bool:
    """Wait until the screen shows a pair with its keys bound, or no pair; True if there is one."""
    page.wait_for_function("() => { const el = document.getElementById('he-item'); return !el || el.dataset.ready; }")
    return page.locator("#he-item").count() > 0


def _judge_all(page, pick_b: bool = True) -> int:
    """Press the key of side B's answer (it says "B") on every pair shown; returns how many were shown."""
    n = 0
    while _next_pair_ready(page):
        left = page.locator("section[aria-labelledby=ar-left] pre").inner_text()
        pair = page.locator("#he-item").get_attribute("data-pair")
        page.keyboard.press("1" if ("B" in left) == pick_b else "2")
        page.wait_for_function("(id) => { const el = document.getElementById('he-item'); "
                               "return !el || el.dataset.pair !== id; }", arg=pair)
        n += 1
    return n


def test_results_stay_hidden_until_the_arena_closes_and_identical_answers_are_ties(page, live_server, project,
                                                                                  reviewer, engineer, shot):
    from webapp.monitoring.models import BlindVerdict

    task = make_task(project, responses=[("3", "3"), ("3", " 3\n"), ("A: 5", "B: 4"), ("A: 7", "B: 6")])
    _as(page, live_server, reviewer)
    page.goto(f"{live_server.url}/p/{project.slug}/")
    page.get_by_role("navigation", name="Project").get_by_role("link", name="Arena").click()
    row = page.locator("tr", has_text=f"#{task.pk}")
    assert "shown once closed" in row.inner_text() and "anyone who may review" in row.inner_text()
    with page.expect_navigation():  # read the judging page, not the list still showing
        row.get_by_role("link", name="Judge").click()
    assert "2 pairs of this task had the same response on both sides" in page.locator("main").inner_text()
    assert _judge_all(page) == 2  # the two identical pairs are never shown
    page.wait_for_selector("text=The results are shown once the task closes")
    with page.expect_navigation():
        page.get_by_role("link", name="Back to the task").click()
    main = page.locator("main").inner_text()
    assert page.locator("[data-results-hidden]").is_visible() and "B wins" not in main and "won" not in main
    assert page.locator("#blind-progress-counts").count() == 0  # progress counts are the engineers'
    shot(page, "blind-results-hidden")
    assert BlindVerdict.objects.filter(pair__task=task, choice="b").count() == 2

    _as(page, live_server, engineer)
    page.goto(f"{live_server.url}/p/{project.slug}/monitor/blind/{task.pk}/")
    assert "rita" in page.locator("#blind-progress-counts").inner_text()
    assert "2 of 2" in page.locator("#blind-progress-counts").inner_text()
    assert page.locator("#blind-results").count() == 0
    page.get_by_role("button", name="Close and show the results").click()
    page.wait_for_selector("#blind-results")
    sentence = page.locator("[data-decisive-sentence]").inner_text()
    assert "B wins 2 of the 2 pairs that have a winner" in sentence
    assert "2 pairs had identical responses and count as ties" in sentence
    assert "Setting the 2 ties aside: won 2 of the 2 pairs that had a winner (100%)." in page.locator(
        "main").inner_text()
    shot(page, "blind-results-closed")
    _as(page, live_server, reviewer)
    page.goto(f"{live_server.url}/p/{project.slug}/monitor/blind/{task.pk}/")
    assert "2 won" in page.locator("main").inner_text()  # everyone sees them once closed


def test_an_unassigned_admin_cannot_judge_until_the_task_is_opened_to_anyone(page, live_server, project, reviewer,
                                                                            admin_user, shot):
    from webapp.monitoring.models import BlindVerdict

    task = make_task(project, source="periodic", anyone_may_judge=False, responses=[("A one", "B one")])
    task.assignees.set([reviewer])
    _as(page, live_server, admin_user)
    page.goto(f"{live_server.url}/p/{project.slug}/monitor/blind/{task.pk}/judge/")
    assert "assigned to other reviewers: only they may judge it" in page.locator("[data-refusal]").inner_text()
    assert page.locator("#he-item").count() == 0
    page.goto(f"{live_server.url}/p/{project.slug}/monitor/blind/{task.pk}/")
    assert page.locator("[data-assignment]").inner_text() == "Assigned to rita."
    assert page.get_by_role("link", name=re.compile("^Judge")).count() == 0
    page.locator("#who-judges summary").click()
    page.get_by_label("Anyone in the project who may review").check()
    page.get_by_role("button", name="Save who may judge").click()
    page.wait_for_selector("[data-assignment]:has-text('Anyone in the project who may review can judge it.')")
    shot(page, "blind-anyone-may-judge")
    page.get_by_role("link", name=re.compile("^Judge")).click()
    assert _judge_all(page) == 1
    assert BlindVerdict.objects.get(pair__task=task).reviewer == admin_user


def test_judges_fit_the_pairs_follow_the_worker_and_get_the_ground_truth(page, live_server, project, engineer,
                                                                        tmp_path, monkeypatch, shot):
    from django.conf import settings

    from training.demo import DEMO_VOCAB
    from training.models import build_tiny_model
    from webapp.monitoring.models import BlindTask, EvaluationStatus, JudgeRun
    from webapp.monitoring.services import judge_run
    from webapp.monitoring.services.arena import arena_create, prompts_from_version, prompts_typed
    from webapp.monitoring.services.blind import new_pair
    from webapp.registry.models import ModelEntry, ModelKind
    from webapp.runs.services import job_create, job_launch

    monkeypatch.setattr("webapp.runs.services.events.enqueue_launch", lambda *a, **k: None)
    monkeypatch.setattr("training.supervisor.spawn_supervisor", lambda attempt_dir, python=None: 424242)
    monkeypatch.setattr("webapp.monitoring.services.arena.enqueue", lambda *a, **k: None)
    monkeypatch.setattr("webapp.monitoring.services.judges.enqueue", lambda *a, **k: None)
    seeded = seed_project(project, engineer, tmp_path)
    job = job_create(project=project, user=engineer, kind="grpo", backend="local", preset="demo-cpu",
                     hp_overrides={"max_steps": 4}, include_unreviewed=True, dataset_version=seeded.prompts,
                     base_model=seeded.model, reward_spec={"shaping": "raw", "components": [
                         {"type": "function", "version_id": seeded.reward.latest_version.pk, "weight": 1.0}]})
    job_launch(job.pk)  # its run directory holds the pinned reward (job.json + reward/), as a real run's does
    c10 = seeded.job.checkpoints.get(step=10)
    ckpt = job.checkpoints.create(step=2, path=c10.path)  # side B: a checkpoint of the run whose reward judges
    short = build_tiny_model(settings.MODELS_ROOT / "teacher-32", vocab=DEMO_VOCAB, hidden=32, layers=1,
                             max_positions=32)
    ModelEntry.objects.create(project=project, name="teacher-32", kind=ModelKind.CAUSAL_LM, path=str(short))

    def arena(prompts, answers):
        task = arena_create(project=project, user=engineer, side_a=f"ckpt:{c10.pk}", side_b=f"ckpt:{ckpt.pk}",
                            prompts=prompts, seed=1)
        for i, (row, (a, b)) in enumerate(zip(task.prompts, answers, strict=True)):
            new_pair(task, i, response_a=a, response_b=b, prompt=row["prompt"], prompt_text=row["prompt"],
                     ground_truth=row["ground_truth"], data_source=row["data_source"],
                     extra_info=row["extra_info"]).save()
        BlindTask.objects.filter(pk=task.pk).update(status=EvaluationStatus.SUCCEEDED, progress=1.0)
        return task

    rows = prompts_from_version(project, seeded.prompts, "val", 4)
    truths = [r["ground_truth"] for r in rows]
    from_data = arena(rows, [(t if i < 1 else "x", t if i < 3 else "y") for i, t in enumerate(truths)])

    _as(page, live_server, engineer)
    page.goto(f"{live_server.url}/p/{project.slug}/monitor/blind/{from_data.pk}/")
    panel = page.locator("#judges")
    teacher = panel.locator("option", has_text="teacher-32")
    assert teacher.is_disabled() and "does not fit these pairs" in teacher.inner_text()
    assert "Not offered: teacher-32 reads at most 32 tokens" in panel.inner_text()
    panel.get_by_label("Judge with").select_option(value="reward")
    panel.get_by_role("button", name="Run the judge").click()
    page.wait_for_selector("#judges-live:has-text('Waiting for a worker')")
    judge_run(judge_run_id=JudgeRun.objects.get(task=from_data).pk)  # the worker's part
    row = page.locator("#judges tr[data-judge-run]")
    page.wait_for_selector("#judges tr[data-judge-run]:has-text('succeeded')")  # no reload by hand
    assert "2 / 2 / 0" in row.inner_text() and page.locator("[data-all-equal]").count() == 0
    shot(page, "judge-with-ground-truth")

    typed = arena([{"prompt": p} for p in prompts_typed("\n".join(r["prompt"] for r in rows))],
                  [(t if i < 1 else "x", t if i < 3 else "y") for i, t in enumerate(truths)])
    page.goto(f"{live_server.url}/p/{project.slug}/monitor/blind/{typed.pk}/")
    option = page.locator("#judges option[value=reward]").inner_text()
    assert "these pairs carry no ground truth" in option
    page.locator("#judges").get_by_role("button", name="Run the judge").click()
    page.wait_for_selector("#judges-live:has-text('Waiting for a worker')")
    judge_run(judge_run_id=JudgeRun.objects.get(task=typed).pk)
    page.wait_for_selector("[data-all-equal]")
    assert "Every response got the same score (0" in page.locator("[data-all-equal]").inner_text()
    assert "0 / 4 / 0" in page.locator("#judges tr[data-judge-run]").inner_text()
    shot(page, "judge-all-scores-equal")
