"""In Chromium, with a real worker: the launch review samples the model's own answers to a few of the job's prompts
and scores them with the job's reward before anything starts. SmolLM2 answers GSM8K-format problems in sentences,
so an exact-match reward ties every group: the review warns, shows the answers with their scores and links the full
zero-signal report. A shaped reward that tells the toy model's answers apart gets no warning."""
from __future__ import annotations

import pytest

from tests.browser.browser_helpers import PASSWORD, seed_project, write_jsonl
from tests.browser_support import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
WORKER_S = 600_000  # the worker loads the model and samples on a loaded 2-core machine

SHAPED = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    # 1 for the exact answer; partial credit (below 0.5) for an answer made of digits
    answer = str(solution_str).strip()
    if answer == str(ground_truth).strip():
        return 1.0
    return 0.4 * sum(c.isdigit() for c in answer) / len(answer) if answer else 0.0
'''


def choose(page, label: str, text: str) -> None:
    select = page.get_by_label(label, exact=True)
    select.select_option(value=select.locator("option", has_text=text).first.get_attribute("value"))


def review(page, live_server, *, preset: str, dataset: str, model: str, reward: str, response_tokens: str | None,
           group: str | None = None):
    page.goto(f"{live_server.url}/p/acme/jobs/new/?preset={preset}")
    choose(page, "Dataset version", dataset)
    choose(page, "Base model", model)
    page.get_by_label(f"{reward} weight").fill("1")
    if response_tokens:
        page.get_by_label("Max response length (tokens)").fill(response_tokens)
    if group:
        page.get_by_label("Group size n (samples per prompt)").fill(group)
    with page.expect_navigation(timeout=180_000):  # the reward's probes and the prompts' token counts run first
        page.get_by_role("button", name="Review the configuration").click()
    page.wait_for_selector("text=Review before launch")


def test_the_review_warns_when_the_reward_ties_every_group_and_not_otherwise(
        page, live_server, project, engineer, tmp_path, shot, celery_worker_proc, smollm2_dir):
    from training import wordproblems
    from webapp.datasets.services import dataset_import
    from webapp.registry.models import ModelEntry, ModelKind
    from webapp.rewards.services import reward_function_create
    from webapp.runs.models import Job, ZeroSignalRun

    engineer.set_password(PASSWORD)
    engineer.save()
    seed_project(project, engineer, tmp_path)  # the toy: model "tiny", "sum-prompts", reward "exact-match"
    train, _ = wordproblems.generate(16, 0, seed=3)
    dataset_import(project=project, user=engineer, name="word-problems", split="0",
                   path=write_jsonl(tmp_path / "word.jsonl", [{k: v for k, v in r.items() if k != "split"}
                                                              for r in train]))
    ModelEntry.objects.create(project=project, name="smollm2-135m-instruct", kind=ModelKind.CAUSAL_LM,
                              path=str(smollm2_dir))
    reward_function_create(project=project, user=engineer, name="number-shaped", source=SHAPED)
    login(page, live_server, engineer.username, PASSWORD)
    jobs = Job.objects.count()

    # SmolLM2 with exact match: it answers in sentences, every answer scores 0
    review(page, live_server, preset="smollm2-cpu", dataset="word-problems", model="smollm2", reward="exact-match",
           response_tokens="16", group="2")  # a short look: 4 prompts x 2 answers, 16 tokens each
    page.wait_for_selector("#prelaunch")  # queued for a worker, then redrawn as it samples and scores
    page.wait_for_selector("#prelaunch-summary", timeout=WORKER_S)
    card = page.locator("#prelaunch")
    assert "warn" in card.get_attribute("class") and card.get_attribute("role") == "alert"
    assert "This run may not learn" in card.locator("h2").inner_text()
    assert page.inner_text("#prelaunch-tied") == "4" and page.inner_text("#prelaunch-share") == "100.0%"
    assert "2 answers each (its group size)" in card.inner_text()
    answers = card.locator("#prelaunch-answers tbody tr")
    assert answers.count() == 3
    texts = card.locator("#prelaunch-answers code").all_inner_texts()
    assert len(texts) == 6 and sum(" " in t for t in texts) >= 4  # sentences, not bare numbers
    assert set(card.locator(".prelaunch-score").all_inner_texts()) == {"0"}
    shot(page, "review-warns")
    run = ZeroSignalRun.objects.get()
    assert run.model.name == "smollm2-135m-instruct"
    assert run.params["group_size"] == 2 and run.params["max_response_length"] == 16
    with page.expect_navigation():
        page.click("#prelaunch-report")
    assert f"zs={run.pk}" in page.url
    page.wait_for_selector("#zs-summary")
    assert page.inner_text("#zs-tied") == "4"
    assert Job.objects.count() == jobs  # nothing launched

    # the toy with a reward that tells its answers apart: the check runs, and does not warn
    review(page, live_server, preset="demo-cpu", dataset="sum-prompts", model="tiny", reward="number-shaped",
           response_tokens=None)
    page.wait_for_selector("#prelaunch-summary", timeout=WORKER_S)
    card = page.locator("#prelaunch")
    assert "warn" not in card.get_attribute("class") and card.get_attribute("role") is None
    assert card.locator("h2").inner_text() == "Can this run learn?"
    assert float(page.inner_text("#prelaunch-share").rstrip("%")) < 50
    assert len(set(card.locator(".prelaunch-score").all_inner_texts())) > 1
    shot(page, "review-does-not-warn")
    assert page.get_by_role("button", name="Launch", exact=True).is_enabled()  # a check never holds a launch back
