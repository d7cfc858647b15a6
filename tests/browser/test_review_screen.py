"""The review screen, as a reviewer meets it: the size of their queue in words, and "Approve as labelled"
offered only while the dataset's labels are shown (sides are randomised, so hidden labels mean nothing to keep)."""
from __future__ import annotations

import re

import pytest

from tests.browser.browser_helpers import PASSWORD, seed_project
from tests.browser_support import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_queue_is_counted_and_approve_waits_for_the_labels(page, live_server, project, engineer, reviewer,
                                                              reviewer2, tmp_path, shot):
    from webapp.review.models import Review

    for user in (engineer, reviewer, reviewer2):
        user.set_password(PASSWORD)
        user.save()
    seeded = seed_project(project, engineer, tmp_path)
    pairs = seeded.prefs.row_count
    login(page, live_server, reviewer.username, PASSWORD)
    page.goto(f"{live_server.url}/p/acme/review/")
    row = page.get_by_role("row", name=re.compile("sum-preferences"))
    assert f"0 done · {pairs} left" in row.inner_text()
    row.get_by_role("link", name="Review").click()
    page.wait_for_selector("#rv-item:not([hidden])")
    progress = page.locator("#rv-progress")
    assert progress.inner_text() == f"0 done · {pairs} left for you"  # not "0 done / 1 assigned"

    # labels hidden (the default): nothing offers to keep them
    approve = page.get_by_role("button", name="Approve as labelled")
    assert not approve.is_visible() and not page.get_by_role("button", name="Swap").is_visible()
    page.keyboard.press("a")
    assert "labels are hidden" in page.locator("#rv-status").inner_text()
    assert Review.objects.count() == 0 and page.inner_text("#rv-index") == "0"
    shot(page, "labels-hidden")

    page.keyboard.press("l")  # show which side the dataset calls chosen
    assert approve.is_visible() and page.locator("#rv-left-tag").is_visible()
    assert page.get_by_role("button", name="Hide labels").is_visible()
    page.keyboard.press("a")
    page.wait_for_function("document.getElementById('rv-index').textContent === '1'")
    assert Review.objects.get().label == "approve"
    assert progress.inner_text() == f"1 done · {pairs - 1} left for you"
    page.keyboard.press("1")
    page.wait_for_function("document.getElementById('rv-index').textContent === '2'")
    shot(page, "labels-shown")

    # another reviewer's pairs leave this one's queue (one reviewer per pair here): the two rita decided and
    # the third, which she holds open
    page.context.clear_cookies()
    login(page, live_server, reviewer2.username, PASSWORD)
    page.goto(f"{live_server.url}/p/acme/review/")
    assert f"0 done · {pairs - 3} left" in page.get_by_role("row", name=re.compile("sum-preferences")).inner_text()
