"""Bringing a new person in, in the browser: the admin invites a name that has no account and gets a link; the
invitee opens it (signed out), creates the account and lands in the project as a reviewer; what a reviewer may
not open, and what does not exist, are the app's own pages with the navigation. Someone with an account who
follows a project link before accepting finds the invitation there."""
from __future__ import annotations

import pytest

from tests.browser.browser_helpers import PASSWORD
from tests.browser_support import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
NEW_PASSWORD = "a-long-new-password"


def assert_styled_with_navigation(page, project_nav: bool) -> None:
    """The app's stylesheet applies (the dark top bar) and the navigation is there; not Django's bare page."""
    assert page.locator("header.topbar").evaluate("el => getComputedStyle(el).backgroundColor") == "rgb(17, 24, 39)"
    assert page.get_by_role("link", name="RLHF Workbench").is_visible()
    if project_nav:
        assert page.get_by_role("navigation", name="Project").get_by_role("link", name="Datasets").is_visible()


def test_a_new_reviewer_joins_through_the_invitation_link(browser, page, live_server, project, admin_user, shot):
    admin_user.set_password(PASSWORD)
    admin_user.save()
    login(page, live_server, admin_user.username, PASSWORD)
    page.goto(f"{live_server.url}/p/{project.slug}/members/")
    page.get_by_label("Username").fill("newbie")
    page.get_by_label("Role").select_option("reviewer")
    page.get_by_role("button", name="Save").click()
    box = page.locator("#invited")
    box.wait_for()
    assert "newbie is invited as reviewer" in box.inner_text()  # not a silent "success": here is the way in
    link = page.get_by_label("Invitation link for newbie").input_value()
    assert f"{live_server.url}/join/" in link
    shot(page, "invited")
    page.reload()  # reloading shows the page, without posting the invitation again or showing the link
    page.locator("#invited").wait_for(state="detached")
    assert page.get_by_role("row", name="newbie").count() == 1

    invitee = browser.new_context(viewport={"width": 1200, "height": 800}).new_page()
    invitee.goto(link)  # the first click, signed out
    assert_styled_with_navigation(invitee, project_nav=False)
    invitee.get_by_role("heading", name=f"Join {project.name}").wait_for()
    invitee.get_by_label("Password", exact=True).fill(NEW_PASSWORD)
    invitee.get_by_label("The password again").fill(NEW_PASSWORD + "?")
    invitee.get_by_role("button", name="Create the account and join").click()
    invitee.get_by_text("The two passwords differ").wait_for()
    invitee.get_by_label("Password", exact=True).fill(NEW_PASSWORD)
    invitee.get_by_label("The password again").fill(NEW_PASSWORD)
    invitee.get_by_role("button", name="Create the account and join").click()
    invitee.wait_for_url(f"{live_server.url}/p/{project.slug}/")
    invitee.get_by_text(f"Welcome, newbie: you joined {project.name} as reviewer").wait_for()
    assert invitee.locator(".userbox .badge").inner_text() == "reviewer"
    shot(invitee, "joined")

    resp = invitee.goto(f"{live_server.url}/p/{project.slug}/settings/")  # an admin's page
    assert resp.status == 403
    assert_styled_with_navigation(invitee, project_nav=True)
    assert invitee.get_by_role("heading", name="Not allowed").is_visible()
    assert "needs the admin role" in invitee.locator("main").inner_text()
    shot(invitee, "forbidden")
    resp = invitee.goto(f"{live_server.url}/p/{project.slug}/no-such-page/")
    assert resp.status == 404
    assert_styled_with_navigation(invitee, project_nav=True)
    assert invitee.get_by_role("heading", name="Page not found").is_visible()
    invitee.get_by_role("link", name=f"Back to {project.name}").click()
    invitee.wait_for_url(f"{live_server.url}/p/{project.slug}/")

    resp = invitee.goto(link)  # used up: says so, on the app's page
    assert resp.status == 404 and "not valid any more" in invitee.locator("main").inner_text()
    assert_styled_with_navigation(invitee, project_nav=False)
    invitee.context.close()


def test_an_invited_account_that_opens_the_project_first_finds_the_invitation(page, live_server, project,
                                                                             admin_user, django_user_model):
    from webapp.core.services import member_add

    django_user_model.objects.create_user(username="rob", password=PASSWORD)
    member_add(actor=admin_user, project=project, username="rob", role="reviewer")
    login(page, live_server, "rob", PASSWORD)
    page.goto(f"{live_server.url}/p/{project.slug}/review/")  # the link a colleague pasted in the chat
    assert_styled_with_navigation(page, project_nav=False)
    page.get_by_role("heading", name=f"You are invited to {project.name}").wait_for()
    page.get_by_role("button", name="Accept and join").click()
    page.wait_for_url(f"{live_server.url}/p/{project.slug}/")
    assert page.locator(".userbox .badge").inner_text() == "reviewer"
