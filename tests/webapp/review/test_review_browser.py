"""Two reviewers and an admin review one dataset in a real browser with overlap 2."""
from __future__ import annotations

import pytest

from tests.browser_support import login
from webapp.review.models import PairState, ResponseEdit
from webapp.review.selectors import training_rows

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests-1"


def _index(pg) -> str:
    return pg.locator("#rv-index").inner_text()


def _wait_index(pg, value: str) -> None:
    pg.wait_for_function(f"document.getElementById('rv-index').textContent === '{value}'")


def test_two_reviewers_and_an_admin(browser, live_server, project, make, reviewer, reviewer2, admin_user, shot):  # noqa: F811
    project.review_overlap = 2
    project.save()
    version = make(project, name="prefs", rows=3)
    screen = f"{live_server.url}/p/acme/review/v/{version.pk}/"

    rita = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
    login(rita, live_server, "rita", PASSWORD)
    rita.goto(screen)
    rita.wait_for_selector("#rv-item:not([hidden])")
    assert _index(rita) == "0"
    rita.evaluate("window.__noReload = true")
    rita.keyboard.press("1")  # left is better
    _wait_index(rita, "1")
    rita.keyboard.press("r")  # reject
    _wait_index(rita, "2")
    # her queue: the third pair, which she holds (two reviewers per pair: an upper bound)
    assert rita.locator("#rv-progress").inner_text() == "2 done · up to 1 left for you"
    rita.keyboard.press("e")  # edit the left response: a dialog with its text
    rita.wait_for_selector("#rv-dialog[open]")
    rita.fill("#rv-dialog-text", "A clearer answer")
    rita.keyboard.press("Control+Enter")
    rita.wait_for_selector("#rv-left-rev:not([hidden])")
    assert "revision 1" in rita.locator("#rv-left-rev").inner_text()
    rita.keyboard.press("p")  # back to row 1
    _wait_index(rita, "1")
    assert "reject" in rita.locator("#rv-mine").inner_text()
    assert rita.evaluate("window.__noReload") is True  # every step ran without a page load
    shot(rita, "reviewer")

    rob = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
    login(rob, live_server, "rob", PASSWORD)
    rob.goto(screen)
    rob.wait_for_selector("#rv-item:not([hidden])")
    assert _index(rob) == "0"
    assert rob.locator("#rv-others").inner_text() == ""  # blind: rita's decision is not shown
    rob.keyboard.press("r")  # disagrees with rita on row 0
    _wait_index(rob, "1")
    rob.keyboard.press("r")  # agrees on row 1
    _wait_index(rob, "2")
    rob.keyboard.press("f")
    rob.fill("#rv-dialog-text", "Prompt is ambiguous")
    rob.keyboard.press("Control+Enter")
    rob.wait_for_selector("#rv-empty:not([hidden])")  # nothing left for rob
    assert PairState.objects.get(version=version, row_index=0).state == "conflict"
    assert PairState.objects.get(version=version, row_index=1).state == "rejected"

    alice = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
    login(alice, live_server, "alice", PASSWORD)
    alice.goto(f"{live_server.url}/p/acme/review/v/{version.pk}/conflicts/")
    alice.click("button[value=swap]")
    alice.wait_for_selector("text=No conflicts")
    alice.goto(f"{live_server.url}/p/acme/review/v/{version.pk}/stats/")
    assert "rita & rob" in alice.locator("main").inner_text()
    shot(alice, "stats")
    state = PairState.objects.get(version=version, row_index=0)
    assert (state.state, state.final_swap, state.decision_source) == ("approved", True, "admin")

    selection = training_rows(version)
    assert selection.included == 1 and selection.excluded == {"rejected": 1, "unreviewed": 1}
    assert ResponseEdit.objects.filter(row__version=version).count() == 1
    for pg in (rita, rob, alice):
        pg.context.close()
