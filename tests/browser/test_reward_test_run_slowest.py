"""A test-run on the reward page names its slowest samples, and each name leads to that sample's row."""
from __future__ import annotations

import re

import pytest

from tests.browser.browser_helpers import PASSWORD
from tests.browser_support import login, start_test_run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SLOW_REWARD = (
    "import time\n\n"
    "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"
    "    if solution_str.startswith('slow'):\n"
    "        time.sleep(0.6)\n"
    "    return float(len(solution_str))\n"
)


def test_a_test_run_lists_its_slowest_samples(page, live_server, project, engineer, celery_worker_proc, shot):
    from webapp.rewards.services import reward_function_create

    engineer.set_password(PASSWORD)
    engineer.save()
    fn = reward_function_create(project=project, user=engineer, name="slow-on-purpose", source=SLOW_REWARD)
    login(page, live_server, engineer.username, PASSWORD)
    page.goto(f"{live_server.url}/p/{project.slug}/rewards/{fn.pk}/")
    responses = ["quick one", "quick two", "slow answer", "quick three", "quick four", "slow again", "quick five"]
    page.get_by_label("Or paste responses").fill("\n".join(responses))
    start_test_run(page)
    listing = page.locator(".test-run-results .slowest-samples")
    listing.wait_for()
    shot(page, "test-run-slowest-samples")
    assert listing.get_by_role("heading").inner_text() == "Slowest samples"
    items = listing.locator("li").all_inner_texts()
    assert len(items) == 5  # the five slowest of seven
    named = [int(re.search(r"sample (\d+)", t).group(1)) for t in items]
    assert set(named[:2]) == {2, 5}  # the two responses that sleep, first
    first_ms = float(re.search(r"([\d.,]+) ms", items[0]).group(1).replace(",", ""))
    assert first_ms >= 500
    # each entry leads to its sample's row in the per-sample table
    listing.get_by_role("link", name=f"sample {named[0]}").click()
    row = page.locator(f"tr[id$='-sample-{named[0]}']")
    assert page.url.endswith(f"-sample-{named[0]}")
    assert "slow" in row.inner_text()
    assert row.evaluate("el => el.matches(':target')")
