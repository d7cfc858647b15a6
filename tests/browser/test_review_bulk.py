"""Bulk review from the pairs page, as an engineer does it: tick rows, choose the scope, press Apply."""
from __future__ import annotations

import pytest

from tests.browser_support import login
from tests.webapp.review.conftest import make_version
from webapp.review.models import PairState

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests-1"


def _states(version) -> dict[int, str]:
    return dict(PairState.objects.filter(version=version).values_list("row_index", "state"))


def test_bulk_review_from_the_page(page, live_server, project, engineer, shot):
    engineer.set_password(PASSWORD)
    engineer.save()
    version = make_version(project, name="prefs", rows=6)
    login(page, live_server, engineer.username, PASSWORD)
    url = f"{live_server.url}/p/acme/review/v/{version.pk}/pairs/"
    page.goto(url)

    # The scope is two real radio buttons, "Selected" checked; no stray option text is printed.
    selected = page.get_by_role("radio", name="Selected pairs")
    matching = page.get_by_role("radio", name="All pairs matching the filter", exact=False)
    assert selected.is_checked() and not matching.is_checked()
    assert page.locator("#bulk-form option").count() == page.locator("#bulk-form select option").count()

    # Nothing ticked: the page says so and nothing changes.
    page.select_option("#id_action", "reject")
    page.get_by_role("button", name="Apply").click()
    page.wait_for_load_state("load")
    assert "Tick at least one pair" in page.locator("#bulk-form [role=alert]").inner_text()
    assert set(_states(version).values()) == {"unreviewed"}

    # Two rows ticked, Reject: those two change and the page says how many.
    page.get_by_label("Select row 1", exact=True).check()
    page.get_by_label("Select row 3", exact=True).check()
    page.select_option("#id_action", "reject")
    selected.check()
    page.get_by_role("button", name="Apply").click()
    page.wait_for_selector(".messages")
    assert "Reject applied to 2 pairs." in page.locator(".messages").inner_text()
    states = _states(version)
    assert {i for i, s in states.items() if s == "rejected"} == {1, 3}
    assert page.locator("tbody tr").nth(1).locator(".state").inner_text() == "rejected"
    shot(page, "selected")

    # All pairs matching a filter (source "math": rows 0, 2, 4), no row ticked.
    page.select_option("#id_data_source", "math")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**data_source=math**")
    page.select_option("#id_action", "approve")
    page.get_by_role("radio", name="All pairs matching the filter", exact=False).check()
    page.get_by_role("button", name="Apply").click()
    page.wait_for_selector(".messages")
    assert "Approve applied to 3 pairs." in page.locator(".messages").inner_text()
    states = _states(version)
    assert {i for i, s in states.items() if s == "approved"} == {0, 2, 4}
    assert states[5] == "unreviewed" and states[1] == "rejected"
    shot(page, "matching")
