"""The arena in a real browser, with a real Celery worker and beat: start an arena between two demo
checkpoints, watch it generate, judge its pairs blind with the keyboard (identical answers are ties, never shown),
close it and read the results, export the verdicts as a preference dataset version, and train a reward model on it
from the New job form."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.browser.conftest import login
from tests.browser.test_golden_path import choose
from tests.conftest import PASSWORD
from tests.webapp.monitoring.test_arena import demo_run

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PROMPTS = ["0+1=", "1+1=", "2+1=", "3+1=", "0+2=", "1+2=", "2+2=", "3+2=", "4+1=", "4+2="]
TIMEOUT_MS = 180_000


@pytest.fixture
def demo_models(settings) -> dict[str, Path]:
    """The demo policy (format only) and a model taught the sums, as two checkpoints of one run would be."""
    import torch

    from training import demo

    torch.set_num_threads(1)
    root = Path(settings.MODELS_ROOT)
    return {"policy": demo.build_demo_model(root / "demo-tiny", warmup_steps=80),
            "teacher": demo.build_demo_teacher(root / "teacher", steps=150),
            "rm_base": demo.build_demo_reward_base(root / "demo-rm-base")}


def right_answer(prompt: str) -> str:
    a, b = prompt.rstrip("=").split("+")
    return str(int(a) + int(b))


def test_arena_judge_export_and_train_a_reward_model(page, live_server, project, engineer, demo_models,
                                                     celery_worker_proc, celery_beat_proc, stop_runs, shot):
    from webapp.datasets.models import DatasetVersion
    from webapp.monitoring.models import BlindTask, BlindVerdict
    from webapp.registry.models import ModelEntry, ModelKind
    from webapp.runs.models import Job

    job, _c10, _c20, _base = demo_run(project, demo_models)
    ModelEntry.objects.create(project=project, name="demo-rm-base", kind=ModelKind.REWARD_MODEL,
                              path=str(demo_models["rm_base"]))
    login(page, live_server, engineer.username, PASSWORD)

    # 1. start an arena: step 10 (A) against step 20 (B), ten typed prompts, short greedy-ish sampling
    page.goto(f"{live_server.url}/p/{project.slug}/")
    page.get_by_role("navigation", name="Project").get_by_role("link", name="Arena").click()
    page.wait_for_url("**/monitor/arenas/")
    page.get_by_label("Side A").select_option(label=f"Run #{job.pk} demo · step 10")
    page.get_by_label("Side B").select_option(label=f"Run #{job.pk} demo · step 20")
    page.get_by_label("Typed prompts").check()
    page.locator("#id_prompts").fill("\n".join(PROMPTS))
    page.get_by_label("Max response length (tokens)").fill("4")
    page.get_by_label("Temperature").fill("0.3")
    page.get_by_label("Seed").fill("11")
    page.get_by_role("button", name="Start the arena").click()
    page.wait_for_url(re.compile(r"/monitor/blind/\d+/$"))
    shot(page, "arena-started")

    # 2. the worker generates both sides; the page follows it and then offers judging
    page.get_by_role("link", name=re.compile(r"^Judge")).wait_for(timeout=TIMEOUT_MS)
    arena = BlindTask.objects.get(project=project)
    assert arena.status == "succeeded" and arena.pairs.count() == 10 and arena.seed == 11
    different = arena.pairs.filter(identical=False).count()
    assert f"seed {arena.seed}" in page.locator("main").inner_text()
    shot(page, "arena-generated")

    # 3. judge the pairs blind with the keyboard: the right sum wins, two wrong answers are both bad (two equal
    #    answers are not shown: they are ties already)
    page.get_by_role("link", name=re.compile(r"^Judge")).click()
    seen_left: dict[str, str] = {}  # prompt -> the response this reviewer saw on the left
    for n in range(different):
        page.wait_for_selector("#he-item[data-ready]")  # its keys are bound
        prompt = page.locator(".he-prompt").inner_text().strip()
        left = page.locator("section[aria-labelledby=ar-left] pre").inner_text().strip()
        right = page.locator("section[aria-labelledby=ar-right] pre").inner_text().strip()
        assert left != right
        seen_left[prompt] = left
        truth = right_answer(prompt)
        key = {(True, False): "1", (False, True): "2", (False, False): "4"}[(left == truth, right == truth)]
        url = page.url
        page.keyboard.press(key)
        page.wait_for_function(f"location.href !== {url!r}")
        if n == 0:
            shot(page, "arena-judging")
    page.wait_for_selector("text=You have judged every pair")
    assert BlindVerdict.objects.filter(pair__task=arena, reviewer=engineer).count() == different
    # the side each verdict records as shown left is the one the page showed (the side is drawn per pair, so a few
    # pairs may all land on one side: the record is checked pair by pair), and B (taught the sums) wins most pairs
    judgements = list(BlindVerdict.objects.filter(pair__task=arena).select_related("pair"))
    for j in judgements:
        shown = seen_left[j.pair.prompt_text.strip()]
        assert shown in (j.pair.response_a.strip(), j.pair.response_b.strip())
        assert j.shown_left == ("a" if shown == j.pair.response_a.strip() else "b")
    b_wins, a_wins = sum(j.choice == "b" for j in judgements), sum(j.choice == "a" for j in judgements)
    assert b_wins >= 5 and b_wins > a_wins

    # 4. results show once the arena is closed: wins, ties, both-bad, identical and losses apart, with intervals
    with page.expect_navigation():  # read the task's page, not the judging page still showing
        page.get_by_role("link", name="Back to the task").click()
    assert page.locator("[data-results-hidden]").is_visible() and page.locator("#blind-results").count() == 0
    page.get_by_role("button", name="Close and show the results").click()
    results = page.locator("#blind-results").inner_text()
    assert "B wins" in results and "Ties" in results and "Both bad" in results and "A wins" in results
    assert "Identical responses" in results
    assert page.locator("#blind-results tbody tr").first.locator("td").first.inner_text() == str(b_wins)
    assert "each count as half a win" in page.locator("main").inner_text()
    assert engineer.username in page.locator("#arena-reviewers").inner_text()
    shot(page, "arena-results")

    # 5. export the judgements as a preference dataset version
    page.get_by_role("button", name="Export as a new dataset version").click()
    page.wait_for_url(re.compile(r"/datasets/\d+/v1/$"))
    version = DatasetVersion.objects.get(dataset__project=project, dataset__name=f"arena-{arena.pk}-preferences")
    assert version.dataset.kind == "preference" and 1 <= version.row_count <= a_wins + b_wins
    assert "Exported" in page.locator(".messages").inner_text()
    shot(page, "arena-exported")

    # 6. a reward-model job trains on it, launched from the New job form
    page.get_by_role("navigation", name="Project").get_by_role("link", name="Jobs").click()
    page.get_by_role("link", name="New job").click()
    page.get_by_label("Kind").select_option("reward_model")
    choose(page.get_by_label("Dataset version"), f"arena-{arena.pk}-preferences v1")
    page.get_by_label("Include unreviewed pairs").check()
    choose(page.get_by_label("Base model"), "demo-rm-base")
    page.get_by_label("Max steps").fill("4")
    page.get_by_label("Save a checkpoint every N steps").fill("4")
    page.get_by_label("Validate every N steps").fill("4")
    page.wait_for_selector("#preview-status:has-text('Ready to launch')")
    page.get_by_role("button", name="Review the configuration").click()
    page.wait_for_selector("text=Review before launch")
    page.get_by_role("button", name="Launch", exact=True).click()
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    rm_job = Job.objects.get(project=project, kind="reward_model")
    assert rm_job.dataset_version_id == version.pk
    page.wait_for_selector("#job-state:has-text('succeeded')", timeout=TIMEOUT_MS)
    rm_job.refresh_from_db()
    assert rm_job.state == "succeeded" and rm_job.last_step == 4
    shot(page, "arena-reward-model-trained")
