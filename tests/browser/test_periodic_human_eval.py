"""Periodic human evaluation from the browser: an engineer schedules it on the New job form (and sees it in the
review's configuration); a reviewer judges the scheduled task blind with the keyboard; once the task closes the run
page draws the result on the win-rate chart and flags the reward that rose while people preferred the older
checkpoint; an automatic judge's status follows the worker live."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.browser.browser_helpers import PASSWORD, open_new_job_form, seed_project
from tests.browser_support import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_schedule_on_the_job_form(page, live_server, project, engineer, tmp_path):
    from webapp.runs.models import Job

    seeded = open_new_job_form(page, live_server, project, engineer, tmp_path)
    card = page.locator("#human-eval-card")
    card.get_by_label("Every N checkpoints").fill("2")
    card.get_by_label("Compare with").select_option("base")
    card.get_by_label("Number of prompts").fill("6")
    card.get_by_label("Flag when the reward rose by more than").fill("0.15")
    page.wait_for_selector("#preview-status:has-text('Ready to launch')")
    page.get_by_role("button", name="Review the configuration").click()
    page.wait_for_selector("text=Review before launch")
    config = page.locator("section.card", has_text="Resolved configuration").locator("pre").inner_text()
    assert "human_eval:" in config and "every: 2" in config and "against: base" in config  # the whole job, reviewed
    assert "reward_rise: 0.15" in config
    page.get_by_role("button", name="Launch", exact=True).click()
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.exclude(pk=seeded.job.pk).get(project=project)
    assert job.config["human_eval"] == {"every": 2, "against": "base", "items": 6, "split": "val",
                                        "reward_rise": 0.15}


def test_judge_the_scheduled_task_and_see_it_flagged_on_the_run_page(page, live_server, project, engineer, reviewer,
                                                                     shot, tmp_path):
    from tests.webapp.monitoring.test_monitoring_periodic import as_generated
    from webapp.monitoring.models import BlindPair, BlindTask
    from webapp.monitoring.services import schedule_process
    from webapp.runs.models import Checkpoint

    reviewer.set_password(PASSWORD)
    reviewer.save()
    seeded = seed_project(project, engineer, tmp_path)
    job = seeded.job
    job.config = {**job.config, "human_eval": {"every": 2, "items": 6, "reward_rise": 0.1}}
    job.save(update_fields=["config"])
    step20 = Path(job.run_dir) / "checkpoints" / "global_step_20"
    (step20 / "model").mkdir(parents=True)
    (step20 / "model" / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    Checkpoint.objects.create(job=job, step=20, path=str(step20), size_bytes=4096)
    val = Path(job.run_dir) / "data" / "val.jsonl"
    val.parent.mkdir(parents=True, exist_ok=True)
    val.write_text("".join(json.dumps({"prompt": f"{i}+{i}="}) + "\n" for i in range(6)))
    (task,) = schedule_process(job)  # what the job_synced hook does when checkpoint 20 appears
    assert (task.b_checkpoint.step, task.opponent) == (20, "step 10")
    as_generated(task, [{"prompt": f"{i}+{i}=", "policy": f"new answer {i}", "other": f"old answer {i}"}
                        for i in range(6)])

    login(page, live_server, reviewer.username, PASSWORD)
    page.goto(f"{live_server.url}/p/{project.slug}/monitor/human-evals/")
    row = page.locator("tr", has_text=f"#{task.pk}")
    assert "assigned to you" in row.inner_text() and "shown once closed" in row.inner_text()
    row.get_by_role("link", name="Judge").click()
    for _ in range(6):  # blind: the reviewer prefers the older checkpoint's answer, wherever it is shown
        page.wait_for_selector("#he-item[data-ready]")  # its keys are bound
        pair = BlindPair.objects.get(pk=int(page.locator("#he-item").get_attribute("data-pair")))
        left = page.locator("section[aria-labelledby=ar-left] pre").inner_text()
        right = page.locator("section[aria-labelledby=ar-right] pre").inner_text()
        assert {left, right} == {pair.response_a, pair.response_b}
        page.keyboard.press("1" if "old answer" in left else "2")
        page.wait_for_function("(id) => { const el = document.getElementById('he-item'); "
                               "return !el || el.dataset.pair !== id; }", arg=str(pair.pk))
    page.wait_for_selector("text=You have judged every pair")

    task.refresh_from_db()  # the only assignee judged every pair: the task closed and its gap was checked
    assert not task.is_open and task.gap["flagged"]
    page.goto(f"{live_server.url}/p/{project.slug}/jobs/{job.pk}/")
    flag = page.locator(".mon-gap-flag")
    flag.wait_for()
    text = flag.inner_text()
    assert "Reward may be hacked" in text and "step 20" in text and "step 10" in text and "0%" in text
    assert "wholly below 0.5" in page.locator("[data-gap-rule]").inner_text()  # the rule is stated
    page.wait_for_function("document.getElementById('chart-win_rate') && "
                           "(document.getElementById('chart-win_rate').data || []).some((t) => t.name === 'human')")
    human = page.evaluate("document.getElementById('chart-win_rate').data.find((t) => t.name === 'human')")
    assert human["x"] == [20] and human["y"] == [0]
    assert "vs step 10" in human["customdata"][0][1] and "REWARD MAY BE HACKED" in human["customdata"][0][1]
    shot(page, "reward-gap-flag")
    assert BlindTask.objects.get(pk=task.pk).flagged_at is not None



def test_an_automatic_judge_beside_the_people_on_the_page_and_the_chart(page, live_server, project, engineer, tmp_path,
                                                                       shot):
    from django.conf import settings

    from training.demo import DEMO_VOCAB
    from training.models import build_tiny_reward_model
    from webapp.monitoring.models import JudgeRun
    from webapp.monitoring.services import human_eval_create, judge_run
    from webapp.registry.models import ModelEntry, ModelKind

    engineer.set_password(PASSWORD)
    engineer.save()
    seeded = seed_project(project, engineer, tmp_path)
    rm = build_tiny_reward_model(Path(settings.MODELS_ROOT) / "rm", vocab=DEMO_VOCAB, hidden=32, layers=1)
    ModelEntry.objects.create(project=project, name="tiny-rm", kind=ModelKind.REWARD_MODEL, path=str(rm))
    job = seeded.job
    samples = Path(job.run_dir) / "samples" / "val" / "10.jsonl"
    samples.parent.mkdir(parents=True, exist_ok=True)
    samples.write_text("".join(json.dumps({"input": f"{i}+1=", "output": str(i + 1), "reference": str(i), "win": 1.0})
                               + "\n" for i in range(5)))
    task = human_eval_create(checkpoint=job.checkpoints.get(step=10), user=engineer, limit=5)

    login(page, live_server, engineer.username, PASSWORD)
    page.goto(f"{live_server.url}/p/{project.slug}/monitor/human-evals/{task.pk}/")  # an old link: the task
    panel = page.locator("#judges")
    assert "No automatic judge has run" in panel.inner_text()
    panel.get_by_label("Judge with").select_option(label="tiny-rm (reward model)")
    panel.get_by_role("button", name="Run the judge").click()
    page.wait_for_selector("text=is judging the pairs on a worker")
    assert "queued" in page.locator("#judges tr[data-judge-run]").inner_text()
    page.wait_for_selector("#judges-live:has-text('Waiting for a worker')")
    judge_run(judge_run_id=JudgeRun.objects.get(task=task).pk)  # what the worker does with the queued run
    # the page follows the judge by itself (no reload by the user): its row turns "succeeded"
    page.wait_for_selector("#judges tr[data-judge-run]:has-text('succeeded')")
    assert page.locator("#judges-live").is_hidden()
    row = page.locator("#judges tr[data-judge-run]")
    text = row.inner_text()
    assert "tiny-rm" in text and "succeeded" in text and "n=5" in text
    assert re.search(r"\d / \d / \d", text) and "0%" in text  # W / T / L, and no position bias: a scalar score
    shot(page, "judges-panel")
    page.goto(f"{live_server.url}/p/{project.slug}/jobs/{job.pk}/")
    page.wait_for_function("(document.getElementById('chart-win_rate') && "
                           "document.getElementById('chart-win_rate').data || []).some((t) => t.name === 'auto judge')")
    judged = page.evaluate("document.getElementById('chart-win_rate').data.find((t) => t.name === 'auto judge')")
    assert judged["x"] == [10] and "tiny-rm" in judged["customdata"][0][1]
