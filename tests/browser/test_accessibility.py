"""Cheap, real accessibility checks on the pages of the golden path: keyboard reach with a visible
focus, form errors next to their fields, empty states that say what to do, times in the user's zone."""
from __future__ import annotations

import re
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from tests.browser.browser_helpers import PASSWORD, focused, named, seed_project, tab_to
from tests.browser.conftest import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def seeded(project, admin_user, tmp_path):
    return seed_project(project, admin_user, tmp_path)


def is_field(name: str):
    return lambda info: info["name"] == name


def test_golden_path_pages_are_keyboard_reachable_with_visible_focus(page, live_server, seeded, admin_user, shot,
                                                                    settings):
    settings.PROJECT_CREATORS = "everyone"  # the home page shows the new-project form
    base = f"{live_server.url}/p/acme"
    login(page, live_server, "alice", PASSWORD)
    # page → the main control(s) a keyboard user must reach on it, in tab order
    tour = [
        ("/", [named("Create project")]),
        ("/p/acme/", [named("Datasets"), named("Members")]),
        ("/p/acme/datasets/", [named("Import a dataset"), named("sum-prompts")]),
        ("/p/acme/datasets/upload/", [is_field("file"), named("Upload and import")]),
        (f"/p/acme/review/v/{seeded.prefs.pk}/", [named("Left is better"), named("Reject")]),
        ("/p/acme/rewards/new/", [is_field("name"), named("Create version 1")]),
        (f"/p/acme/rewards/{seeded.reward.pk}/", [named("Save as new version"), named("Run test")]),
        ("/p/acme/jobs/models/", [is_field("path"), named("Register")]),
        ("/p/acme/jobs/new/", [is_field("dataset_version"), is_field("max_steps"), named("Review the configuration")]),
        (f"/p/acme/jobs/{seeded.job.pk}/", [named("Clone with edits"), named("Curves")]),
    ]
    for path, targets in tour:
        page.goto(live_server.url + path)
        page.wait_for_load_state("load")
        for target in targets:
            tab_to(page, target, f"a main control of {path}")

    # the rollback flow by keyboard: arrow to the Checkpoints tab, Tab to Roll back, Enter opens the dialog
    page.goto(f"{base}/jobs/{seeded.job.pk}/")
    tab_to(page, named("Curves"), "the Curves tab")
    page.keyboard.press("ArrowRight")
    assert focused(page)["text"].startswith("Checkpoints")
    tab_to(page, named("Roll back"), "the Roll back action")
    page.keyboard.press("Enter")
    dialog = page.get_by_role("dialog")
    dialog.wait_for()
    assert focused(page)["name"] == "reason"  # focus moves into the dialog, on its first field
    shot(page, "rollback-dialog-by-keyboard")
    page.keyboard.press("Escape")
    dialog.wait_for(state="hidden")


def test_launch_form_error_is_next_to_its_field(page, live_server, seeded, admin_user, shot):
    from webapp.runs.models import Job

    login(page, live_server, "alice", PASSWORD)
    page.goto(f"{live_server.url}/p/acme/jobs/new/")
    form = page.locator("#job-form")
    dataset = form.get_by_label("Dataset version")
    dataset.select_option(value=dataset.locator("option", has_text="sum-prompts").first.get_attribute("value"))
    form.get_by_label("Base model").select_option(label="tiny · Causal LM (policy / teacher)")
    form.get_by_label("exact-match weight").fill("1")
    form.get_by_label("Group size n (samples per prompt)").fill("1")
    with page.expect_navigation():
        form.get_by_role("button", name="Launch without review").click()
    group = page.locator("#id_group_size")
    field = page.locator(".field", has=group)
    error = field.locator(".field-error")
    assert "at least 2" in error.inner_text()
    assert error.get_attribute("role") == "alert"
    assert field.get_attribute("class").split().count("has-error") == 1
    # the message sits right under its input, not in a summary far away
    gap = error.bounding_box()["y"] - (group.bounding_box()["y"] + group.bounding_box()["height"])
    assert 0 <= gap < 80, gap
    assert page.locator(".field-error", has_text="at least 2").count() == 1
    assert Job.objects.count() == 1  # only the seeded run: nothing was launched
    shot(page, "launch-error")


def test_empty_states_say_what_to_do_next(page, live_server, admin_user, shot, settings):
    settings.PROJECT_CREATORS = "everyone"
    login(page, live_server, "alice", PASSWORD)
    page.get_by_label("Name", exact=True).fill("Fresh start")
    page.get_by_role("button", name="Create project").click()
    page.wait_for_url("**/p/fresh-start/")
    base = f"{live_server.url}/p/fresh-start"
    # page → the link its empty state offers, and where that link must lead
    expectations = [
        ("/datasets/", "Import a file", "/datasets/upload/"),
        ("/review/", "Datasets", "/datasets/"),
        ("/rewards/", "New reward function", "/rewards/new/"),
        ("/jobs/", "Launch one", "/jobs/new/"),
    ]
    for path, link, target in expectations:
        page.goto(base + path)
        empty = page.locator("main .empty").first
        assert empty.is_visible(), path
        empty.get_by_role("link", name=link).click()
        page.wait_for_url(base + target)
        shot(page, "empty-" + path.strip("/"))


def _en_us(moment: datetime) -> str:
    """What Chromium's en-US toLocaleString() prints: 1/2/2026, 3:04:05 PM."""
    hour = moment.hour % 12 or 12
    return f"{moment.month}/{moment.day}/{moment.year}, {hour}:{moment:%M:%S} {'AM' if moment.hour < 12 else 'PM'}"


def test_times_show_in_the_browsers_timezone(page, live_server, seeded, admin_user):
    login(page, live_server, "alice", PASSWORD)
    for path in (f"/p/acme/jobs/{seeded.job.pk}/", "/p/acme/datasets/"):
        page.goto(live_server.url + path)
        stamp = page.locator("main time[datetime]").first
        iso = stamp.get_attribute("datetime")
        shown = re.sub(r"[\u202f\u00a0]", " ", stamp.inner_text())
        paris = datetime.fromisoformat(iso).astimezone(ZoneInfo("Europe/Paris"))
        assert shown == _en_us(paris), (path, iso, shown)
        assert shown != _en_us(datetime.fromisoformat(iso).astimezone(ZoneInfo("UTC")))  # not the server's UTC
        assert stamp.get_attribute("title") == iso  # the exact instant stays available on hover
