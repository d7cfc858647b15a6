"""In Chromium: choosing a real model on the New job form says which of the demo preset's settings were made for
another model and applies the preset made for it in one click; going back to the toy model offers the demo's."""
from __future__ import annotations

import pytest

from tests.browser.browser_helpers import PASSWORD, seed_project
from tests.browser_support import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def choose(page, label: str, text: str) -> None:
    select = page.get_by_label(label, exact=True)
    select.select_option(value=select.locator("option", has_text=text).first.get_attribute("value"))


def test_switching_to_smollm2_offers_the_settings_made_for_it(page, live_server, project, engineer, tmp_path, shot,
                                                             smollm2_dir):
    from webapp.registry.models import ModelEntry, ModelKind

    engineer.set_password(PASSWORD)
    engineer.save()
    seed_project(project, engineer, tmp_path)
    ModelEntry.objects.create(project=project, name="smollm2-135m-instruct", kind=ModelKind.CAUSAL_LM,
                              path=str(smollm2_dir))  # registered without its size: counted from the weights
    login(page, live_server, engineer.username, PASSWORD)
    page.goto(f"{live_server.url}/p/acme/jobs/new/")
    choose(page, "Dataset version", "sum-prompts")
    choose(page, "Base model", "tiny")
    page.get_by_label("exact-match weight").fill("1")
    page.wait_for_selector("#preview-status:has-text('Ready to launch')")
    box = page.locator("#model-fit")
    assert box.is_hidden()  # the demo preset on the toy model: nothing to say

    page.get_by_label("Sampling temperature").fill("0.7")  # the user's own value is theirs
    choose(page, "Base model", "smollm2")
    box.wait_for(state="visible")
    text = page.inner_text("#model-fit-text")
    assert "The preset demo-cpu was made for the demo's tiny models" in text
    assert "smollm2-135m-instruct has 135M parameters and a context of 8,192 tokens" in text
    rows = {r.locator("th").inner_text(): r.locator("td").all_inner_texts()
            for r in box.locator("#model-fit-settings tbody tr").all()}
    assert rows["Learning rate"] == ["0.001", "0.000001"] or rows["Learning rate"] == ["0.001", "1e-6"]
    assert rows["Max prompt length (tokens)"] == ["8", "192"] and rows["Max sequence length (tokens)"] == ["16", "320"]
    assert "Sampling temperature" not in rows
    assert page.inner_text("#model-fit-suggested-head") == "smollm2-cpu"
    assert page.locator("#model-fit-lengths").is_hidden()  # the preset's lengths fit: no separate offer
    shot(page, "model-fit")

    page.get_by_role("button", name="Use smollm2-cpu's settings").click()
    assert page.get_by_label("Preset", exact=True).input_value() == "smollm2-cpu"
    assert float(page.get_by_label("Learning rate").input_value()) == 1e-6
    assert page.get_by_label("Max prompt length (tokens)").input_value() == "192"
    assert page.get_by_label("Max response length (tokens)").input_value() == "128"
    box.wait_for(state="hidden")  # the preset now fits the model
    page.wait_for_selector("#preview-status:has-text('Ready to launch')")

    choose(page, "Base model", "tiny")  # back to the toy: SmolLM2's lengths pass its 32-token context
    box.wait_for(state="visible")
    text = page.inner_text("#model-fit-text")
    assert "The preset smollm2-cpu was made for SmolLM2-135M-Instruct" in text
    assert "The max sequence length 320 is longer than its context" in text
    page.get_by_role("button", name="Use demo-cpu's settings").click()
    assert page.get_by_label("Max sequence length (tokens)").input_value() == "16"
    box.wait_for(state="hidden")
