"""The New job form at common laptop widths: every column of the reward table is visible, beside (not under)
the sticky Preview panel, also when a reward version carries a long message."""
from __future__ import annotations

import pytest

from tests.browser.browser_helpers import PASSWORD, REWARD_SOURCE, seed_project
from tests.browser_support import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LONG_MESSAGE = ("Score the exact answer only after stripping whitespace, and treat an empty completion as wrong "
                "so that the policy cannot learn to stop early — agreed with the reviewers after the first run")

BOXES_JS = """() => {
  const box = (el) => { const r = el.getBoundingClientRect(); return {left: r.left, right: r.right}; };
  const weights = [...document.querySelectorAll('#reward-card input.weight')].map(box);
  const versions = [...document.querySelectorAll('#reward-card select')].map(box);
  return {card: box(document.getElementById('reward-card')), preview: box(document.querySelector('aside.preview')),
          weights, versions, viewport: document.documentElement.clientWidth,
          scrollWidth: document.documentElement.scrollWidth};
}"""


@pytest.mark.parametrize("width", [1280, 1440])
def test_reward_table_is_fully_visible(browser, live_server, project, engineer, tmp_path, shot, width):
    from webapp.rewards.services import reward_version_save

    engineer.set_password(PASSWORD)
    engineer.save()
    seeded = seed_project(project, engineer, tmp_path)
    reward_version_save(function=seeded.reward, user=engineer, source=REWARD_SOURCE + "\n", message=LONG_MESSAGE)
    page = browser.new_context(viewport={"width": width, "height": 900}).new_page()
    login(page, live_server, engineer.username, PASSWORD)
    page.goto(f"{live_server.url}/p/acme/jobs/new/")
    page.get_by_label("Kind").select_option("grpo")
    page.wait_for_selector("#reward-card input.weight")
    page.locator("#reward-card input.weight").first.fill("1")
    page.wait_for_function("document.getElementById('preview-yaml').textContent.length > 0")  # the panel is full
    b = page.evaluate(BOXES_JS)
    shot(page, f"new-job-{width}")
    page.screenshot(path=str(shot(page, f"new-job-{width}-viewport")), full_page=False)
    assert b["weights"] and b["versions"]
    assert b["scrollWidth"] <= b["viewport"], "the page scrolls sideways"
    assert b["card"]["right"] <= b["preview"]["left"], "the reward card runs under the Preview panel"
    for control in b["weights"] + b["versions"]:
        assert b["card"]["left"] <= control["left"] and control["right"] <= b["card"]["right"], b
    # the version with the long message is the one chosen (its option shows the start of the message)
    version = page.locator("#reward-card select").first
    assert LONG_MESSAGE[:40] in version.locator("option:checked").inner_text()
