"""What each role cannot do, seen in the browser: controls absent, direct visits refused.

Each test also checks the next role up does see the control, so an absent button means "not
allowed", not "not rendered for anyone".
"""
from __future__ import annotations

import re

import pytest

from tests.browser.browser_helpers import PASSWORD, seed_project
from tests.browser.conftest import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


NEW_REWARD_VERSION = {"source": "def compute_score(*a, **k):\n    return 1.0\n", "entry_point": "compute_score"}


@pytest.fixture
def seeded(project, admin_user, tmp_path):
    return seed_project(project, admin_user, tmp_path)


def status_of(page, url: str) -> int:
    return page.goto(url).status


def post_status(page, url: str, form: dict) -> int:
    """A form post the way the page would send it (session cookie and CSRF token), minus the button."""
    token = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    return page.request.post(url, form=form, headers={"X-CSRFToken": token, "Referer": url}).status


def buttons(page) -> list[str]:
    """Visible buttons and button-like links of the main area."""
    return [t.strip() for t in page.locator("main").get_by_role("button").all_inner_texts()
            + page.locator("main a.button").all_inner_texts()]


def test_viewer_reads_but_cannot_upload_review_save_or_launch(page, live_server, seeded, viewer, reviewer, shot):
    base = f"{live_server.url}/p/acme"
    login(page, live_server, "victor", PASSWORD)

    page.goto(f"{base}/datasets/")
    assert page.get_by_role("link", name="sum-prompts").count() == 1  # can read
    assert page.get_by_role("link", name="Import a dataset").count() == 0
    assert status_of(page, f"{base}/datasets/upload/") == 403

    page.goto(f"{base}/review/")
    row = page.get_by_role("row", name=re.compile("sum-preferences"))
    assert row.get_by_role("link", name="Stats").count() == 1
    assert row.get_by_role("link", name="Review", exact=True).count() == 0
    assert status_of(page, f"{base}/review/v/{seeded.prefs.pk}/") == 403

    page.goto(f"{base}/rewards/{seeded.reward.pk}/")
    assert page.get_by_text("Source (read-only)").count() == 1
    assert not {"Save as new version", "Run test"} & set(buttons(page))
    assert post_status(page, f"{base}/rewards/{seeded.reward.pk}/",
                       NEW_REWARD_VERSION) == 403

    page.goto(f"{base}/jobs/")
    assert page.get_by_role("link", name="New job").count() == 0
    assert status_of(page, f"{base}/jobs/new/") == 403

    page.goto(f"{base}/jobs/{seeded.job.pk}/")
    page.get_by_role("tab", name=re.compile("Checkpoints")).click()
    assert page.locator("table.mon-ckpts").count() == 1  # the table is there, its actions are not
    assert not {"Cancel", "Clone with edits", "Roll back", "Promote", "Evaluate"} & set(buttons(page))
    shot(page, "viewer-job")

    # the reviewer, one role up, does get the review button the viewer lacked
    page.context.clear_cookies()
    login(page, live_server, "rita", PASSWORD)
    page.goto(f"{base}/review/")
    assert page.get_by_role("row", name=re.compile("sum-preferences")).get_by_role(
        "link", name="Review", exact=True).count() == 1


def test_reviewer_reviews_but_cannot_launch_or_save_reward_code(page, live_server, seeded, reviewer, engineer, shot):
    base = f"{live_server.url}/p/acme"
    login(page, live_server, "rita", PASSWORD)

    page.goto(f"{base}/review/v/{seeded.prefs.pk}/")
    page.wait_for_selector("#rv-item:not([hidden])")
    page.keyboard.press("2")
    page.wait_for_selector("#rv-status:has-text('Saved row')")  # reviewing is allowed

    page.goto(f"{base}/jobs/")
    assert page.get_by_role("link", name="New job").count() == 0
    assert status_of(page, f"{base}/jobs/new/") == 403

    page.goto(f"{base}/rewards/{seeded.reward.pk}/")
    assert page.get_by_text("Source (read-only)").count() == 1
    assert "Save as new version" not in buttons(page)
    assert post_status(page, f"{base}/rewards/{seeded.reward.pk}/",
                       NEW_REWARD_VERSION) == 403
    assert seeded.reward.versions.count() == 1
    assert status_of(page, f"{base}/datasets/upload/") == 403
    shot(page, "reviewer-reward")

    page.context.clear_cookies()
    login(page, live_server, "erin", PASSWORD)
    page.goto(f"{base}/jobs/")
    assert page.get_by_role("link", name="New job").count() == 1  # one role up: allowed


def test_engineer_launches_but_cannot_manage_members(page, live_server, seeded, engineer, viewer, admin_user, shot):
    from webapp.core.models import Membership

    base = f"{live_server.url}/p/acme"
    login(page, live_server, "erin", PASSWORD)

    page.goto(f"{base}/jobs/{seeded.job.pk}/")
    page.get_by_role("tab", name=re.compile("Checkpoints")).click()
    # engineers act on runs: the very controls the viewer test finds absent
    assert {"Clone with edits", "Roll back", "Promote", "Evaluate"} <= set(buttons(page))

    page.goto(f"{base}/")
    assert page.get_by_role("link", name="Settings").count() == 0
    with page.expect_navigation():  # read the members' table, not the overview's
        page.get_by_role("link", name="Members").first.click()
    assert "victor" in page.locator("main table").inner_text()
    assert page.get_by_role("heading", name="Add or change a member").count() == 0
    assert page.get_by_role("button", name="Remove").count() == 0
    assert post_status(page, f"{base}/members/", {"username": "victor", "role": "admin"}) == 403
    victor = Membership.objects.get(project=seeded.job.project, user=viewer)
    assert post_status(page, f"{base}/members/{victor.pk}/remove/", {}) == 403
    assert status_of(page, f"{base}/settings/") == 403
    assert Membership.objects.get(pk=victor.pk).role == "viewer"
    shot(page, "engineer-members")


def test_admin_manages_members_but_cannot_drop_the_last_admin(page, live_server, seeded, admin_user, viewer, shot):
    from webapp.core.models import Membership

    login(page, live_server, "alice", PASSWORD)
    page.goto(f"{live_server.url}/p/acme/members/")
    form = page.locator("form", has=page.get_by_role("button", name="Save"))
    form.get_by_label("Username").fill("victor")
    form.get_by_label("Role").select_option("reviewer")
    form.get_by_role("button", name="Save").click()
    page.wait_for_selector("text=victor is now reviewer")

    form.get_by_label("Username").fill("alice")
    form.get_by_label("Role").select_option("viewer")
    form.get_by_role("button", name="Save").click()
    error = page.locator(".field.has-error", has=page.get_by_label("Role"))
    assert "at least one admin" in error.locator(".field-error").inner_text()  # next to the field
    assert Membership.objects.get(user=admin_user).role == "admin"
    shot(page, "admin-last-admin")


def test_outsider_gets_404_and_never_sees_the_project(page, live_server, seeded, outsider, shot):
    base = f"{live_server.url}/p/acme"
    login(page, live_server, "oscar", PASSWORD)
    page.goto(f"{live_server.url}/")
    assert "Acme RLHF" not in page.locator("body").inner_text()
    assert page.locator("#project-switch option", has_text="Acme").count() == 0
    for path in ("/", "/datasets/", "/review/", f"/rewards/{seeded.reward.pk}/", "/jobs/new/",
                 f"/jobs/{seeded.job.pk}/", "/members/"):
        assert status_of(page, base + path) == 404, path  # not 403: the project's existence stays hidden
    assert page.request.get(f"{live_server.url}/api/projects/acme/jobs/").status == 404
    shot(page, "outsider-404")
