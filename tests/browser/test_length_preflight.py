"""The length pre-flight, driven in the browser: the job form's preview counts the too-long prompts, the
launch review draws their histogram with the limit and warns above the share the user sets, a launch in which
every prompt is too long is refused on its field, and the run page shows the pre-flight beside the clip ratio."""
from __future__ import annotations

import re

import pytest

from tests.browser.browser_helpers import PASSWORD, seed_project, write_jsonl
from tests.browser_support import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
LONG = ["11+22+33=", "1+2+3+4+5+6="]  # 9 and 12 tokens for the demo's character tokenizer


def choose(page, label: str, text: str) -> None:
    select = page.get_by_label(label)
    select.select_option(value=select.locator("option", has_text=text).first.get_attribute("value"))


def test_the_launch_review_counts_too_long_prompts_and_the_run_page_keeps_it(page, live_server, project, engineer,
                                                                           tmp_path, shot):
    from webapp.datasets.services import dataset_import
    from webapp.runs.models import Job, MetricPoint

    engineer.set_password(PASSWORD)
    engineer.save()
    seeded = seed_project(project, engineer, tmp_path)
    rows = [{"prompt": f"{a}+{b}=", "ground_truth": str(a + b)} for a in range(1, 10) for b in (1, 2)]
    rows += [{"prompt": p, "ground_truth": "0"} for p in LONG]
    dataset_import(project=project, user=engineer, name="mixed-sums", path=write_jsonl(tmp_path / "mixed.jsonl", rows),
                   split="4")
    login(page, live_server, engineer.username, PASSWORD)
    page.goto(f"{live_server.url}/p/acme/jobs/new/")
    choose(page, "Dataset version", "mixed-sums")
    choose(page, "Base model", "tiny")
    page.get_by_label("exact-match weight").fill("1")
    page.get_by_label("Max prompt length (tokens)").fill("8")
    page.wait_for_selector("#preview-data:has-text('longer than the max prompt length 8: 2 of 20')")

    # every prompt too long: refused on its field, live and on review
    page.get_by_label("Max prompt length (tokens)").fill("3")
    field = page.locator(".field").filter(has=page.get_by_label("Max prompt length (tokens)"))
    field.locator(".field-error", has_text="Every prompt is longer").wait_for()
    page.get_by_role("button", name="Review the configuration").click()
    page.wait_for_selector("#id_max_prompt_length-error:has-text('the shortest is 4 tokens')")
    assert Job.objects.count() == 1

    # two of twenty too long: the review draws them and warns (above the default 5 %)
    page.get_by_label("Max prompt length (tokens)").fill("8")
    page.get_by_role("button", name="Review the configuration").click()
    page.wait_for_selector("text=Review before launch")
    card = page.locator("#lengths")
    assert "2 of 20 prompts (10.0%) are longer than the max prompt length 8 tokens" in card.inner_text()
    assert "counted with tiny's tokenizer and chat template" in card.inner_text()
    page.wait_for_selector("#chart-lengths .barlayer .point", state="attached")
    colors = page.evaluate("document.getElementById('chart-lengths').data[0].marker.color")
    counts = page.evaluate("document.getElementById('chart-lengths').data[0].y")
    assert sum(n for n, c in zip(counts, colors, strict=True) if c == "#b42318") == 2  # the long ones in red
    assert page.evaluate("document.getElementById('chart-lengths').layout.shapes[0].x0") == 8
    assert "2 of 20 prompts (10.0%)" in page.locator(".card.warn").inner_text()
    shot(page, "review-lengths")

    # the user raises the share that warns: no warning, the histogram stays
    page.get_by_role("button", name="Back to the form").click()
    page.get_by_label("Warn above this share of too-long prompts").fill("0.2")
    page.get_by_role("button", name="Review the configuration").click()
    page.wait_for_selector("text=Review before launch")
    assert page.locator("#lengths").is_visible() and "2 of 20 prompts" not in page.locator("main").inner_text() \
        .split("Prompt and response lengths")[0]
    page.get_by_role("button", name="Launch", exact=True).click()
    page.wait_for_url(re.compile(r"/jobs/\d+/(#\w+)?$"), wait_until="domcontentloaded")
    job = Job.objects.exclude(pk=seeded.job.pk).get()

    # the run page: the same pre-flight, and the share of responses cut at the max length beside it
    MetricPoint.objects.bulk_create(MetricPoint(job=job, step=s, name="response_length/clip_ratio", value=v,
                                                wall_time=1.7e9 + s) for s, v in ((1, 0.5), (2, 0.25)))
    page.reload(wait_until="domcontentloaded")
    card = page.locator("#lengths")
    assert "2 of 20 prompts (10.0%)" in card.inner_text()
    assert "Responses cut at the max response length: 25.0% at step 2" in card.inner_text()
    page.wait_for_selector("#chart-lengths .barlayer .point", state="attached")
    shot(page, "run-page-lengths")
