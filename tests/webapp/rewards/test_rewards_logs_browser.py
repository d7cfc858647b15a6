"""In the browser: a reward that prints is test-run from the editor, and what it printed for each sample is shown
beside that sample's score."""
from __future__ import annotations

import pytest

from tests.browser_support import login, start_test_run
from tests.webapp.rewards.test_rewards_browser import set_code

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PRINTS = """def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    print(f"compared {solution_str!r} with {ground_truth!r}")
    return float(solution_str.strip() == ground_truth.strip())
"""


def test_what_a_reward_prints_shows_beside_each_score(page, live_server, engineer, arith, shot,  # noqa: F811
                                                     celery_worker_proc):  # test-runs are scored on a worker
    login(page, live_server, "erin", "pw-for-tests-1")
    page.goto(f"{live_server.url}/p/acme/rewards/new/")
    page.wait_for_selector(".CodeMirror .CodeMirror-linenumber")
    page.fill("#id_name", "talkative")
    set_code(page, PRINTS)
    page.click("button:has-text('Create version 1')")
    page.wait_for_url("**/rewards/*/")

    page.select_option("#id_dataset_version", str(arith.pk))
    page.fill("#id_responses", "3\n5")  # rows 0 and 1: ground truths 3 and 4
    start_test_run(page)
    page.wait_for_selector(".test-run-results .per-sample")
    headers = [h.strip() for h in page.locator(".per-sample thead th").all_inner_texts()]
    assert headers.index("Printed") == headers.index("Score") + 1  # beside the score
    rows = page.locator(".per-sample tbody tr")
    assert rows.count() == 2
    first = [c.strip() for c in rows.nth(0).locator("td").all_inner_texts()]
    second = [c.strip() for c in rows.nth(1).locator("td").all_inner_texts()]
    at = headers.index("Score")
    assert first[at:at + 2] == ["1.0000", "compared '3' with '3'"]
    assert second[at:at + 2] == ["0.0000", "compared '5' with '4'"]
    shot(page, "reward-logs")
