"""In Chromium: attach a VERL run started by hand (its folder written by VERL's own writers) from the jobs page,
watch it followed live (curves, steps, samples, checkpoints, the read-only banner), roll back from one of its
checkpoints into an app-owned run, and stop following it."""
from __future__ import annotations

import re

import pytest

from tests.browser_support import login
from tests.conftest import PASSWORD
from tests.external_runs import VerlRun

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PROMPTS, TRUTH = ["1+2=", "3+4="], ["3", "7"]


def _steps(run, steps):
    for s in steps:
        run.step(s, {"critic/score/mean": 0.25 * s, "actor/kl_loss": 0.01 * s, "actor/entropy": 1.1},
                 PROMPTS, [["3", "4"], ["7", "8"]], TRUTH)


def test_attach_a_verl_run_follow_it_and_roll_back(page, live_server, project, engineer, tmp_path, settings,
                                                   monkeypatch, shot):
    from training.demo import DEMO_VOCAB, EXACT_MATCH_SOURCE, arithmetic_rows
    from training.models import build_tiny_model
    from webapp.registry.models import ModelEntry, ModelKind
    from webapp.rewards.services import reward_function_create
    from webapp.runs.models import Job
    from webapp.runs.services import attach
    from webapp.runs.services.sync import sync_job

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.ATTACH_ROOTS = [str(tmp_path / "shared")]
    monkeypatch.setattr(attach, "SETTLE_S", 0.0)
    monkeypatch.setattr("webapp.runs.services.events.enqueue_launch", lambda *a, **kw: None)
    model_dir = build_tiny_model(tmp_path / "models" / "tiny", vocab=DEMO_VOCAB, hidden=32, layers=1,
                                 max_positions=32)
    ModelEntry.objects.create(project=project, name="tiny", kind=ModelKind.CAUSAL_LM, path=str(model_dir))
    reward_function_create(project=project, user=engineer, name="exact-match", source=EXACT_MATCH_SOURCE)
    from tests.webapp.runs.conftest import make_version
    from webapp.datasets.models import DatasetKind

    make_version(project, "arith", DatasetKind.PROMPTS, arithmetic_rows("train"), arithmetic_rows("val")[:8])
    run = VerlRun(tmp_path / "shared" / project.slug / "qwen-gsm8k", model_dir)
    _steps(run, [1, 2])
    run.checkpoint(2)
    run.settle()

    login(page, live_server, engineer.username, PASSWORD)
    page.goto(f"{live_server.url}/p/{project.slug}/jobs/")
    page.get_by_role("link", name="Attach a run").click()
    assert f"{tmp_path / 'shared' / project.slug}/" in page.locator("#attach-roots").inner_text()
    page.get_by_label("Run folder").fill("/etc")
    page.get_by_role("button", name="Attach and follow").click()
    assert "approved folders" in page.locator(".field-error").first.inner_text()  # refused, said next to the field
    page.get_by_label("Run folder").fill(str(run.root))
    page.get_by_label("Name").fill("qwen by hand")
    page.get_by_label("Base model").select_option(label="tiny")
    page.get_by_label("Prompt data").select_option(index=1)
    page.get_by_label("Reward").select_option(index=1)
    page.get_by_role("button", name="Attach and follow").click()
    banner = page.locator("#attached-run")
    banner.wait_for()
    job = Job.objects.get(attached_dir=str(run.root.resolve()))
    text = banner.inner_text()
    assert "Attached, read-only" in text and str(run.root.resolve()) in text and "only notify" in text
    assert "metrics in logs/gsm8k_grpo/qwen_run1.jsonl" in text and "checkpoints in checkpoints/" in text
    assert page.locator("#job-step").inner_text() == "2"
    page.locator("#mon-charts .js-plotly-plot").first.wait_for()
    shot(page, "attached-run")

    # VERL goes on: the page follows (the beat's sync is the test's)
    _steps(run, [3])
    run.checkpoint(3)
    run.settle()
    sync_job(job)
    page.wait_for_function("document.getElementById('job-step').textContent === '3'")
    page.get_by_role("tab", name="Samples").click()
    body = page.locator("#mon-samples-body")
    body.locator("[data-samples-summary]").wait_for()
    assert "Step 3: 4 samples of 2 prompts" in body.locator("[data-samples-summary]").inner_text()
    page.get_by_role("tab", name=re.compile("Checkpoints")).click()
    rows = page.locator("table.mon-ckpts tbody tr")
    rows.filter(has=page.locator("th", has_text=re.compile(r"^3$"))).wait_for()
    shot(page, "attached-checkpoints")

    # roll back from step 2: an app-owned child run resumes from the external checkpoint
    rows.filter(has=page.locator("th", has_text=re.compile(r"^2$"))).get_by_role("link", name="Roll back").click()
    dialog = page.get_by_role("dialog")
    dialog.wait_for()
    dialog.get_by_label("Reason").fill("branch before step 3")
    dialog.get_by_role("button", name="Roll back").click()
    page.wait_for_url(lambda url: f"/jobs/{job.pk}/" not in url)
    child = Job.objects.exclude(pk=job.pk).get()
    assert child.parent_id == job.pk and not child.is_attached and child.resume_checkpoint.path.startswith(
        str(run.root.resolve()))

    page.goto(f"{live_server.url}/p/{project.slug}/monitor/jobs/{job.pk}/")
    page.get_by_role("button", name="Stop following").click()
    page.get_by_text("is no longer followed").wait_for()
    job.refresh_from_db()
    assert job.state == "succeeded"
