"""The browser can log in and render a Plotly chart from the locally served plotly.js."""
from __future__ import annotations

import pytest

from tests.browser.conftest import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_login_and_project_page_with_keyboard_focus(page, live_server, admin_user, shot):
    login(page, live_server, "alice", "pw-for-tests-1")
    page.goto(f"{live_server.url}/p/acme/")
    assert page.locator("h1").inner_text() == "Acme RLHF"
    page.keyboard.press("Tab")  # the skip link is the first focusable element and becomes visible
    assert page.evaluate("document.activeElement.className") == "skip-link"
    shot(page, "project")


def test_plotly_renders_offline(page, live_server, admin_user):
    login(page, live_server, "alice", "pw-for-tests-1")
    page.route("**/*", lambda route: route.abort() if not route.request.url.startswith(live_server.url)
               else route.continue_())
    page.goto(f"{live_server.url}/p/acme/")
    page.add_script_tag(url=f"{live_server.url}/static/plotly/plotly.min.js")
    page.evaluate("document.body.insertAdjacentHTML('beforeend', '<div id=chart></div>');"
                  "Plotly.newPlot('chart', [{x:[1,2,3], y:[0.1,0.3,0.5]}])")
    page.wait_for_selector("#chart .main-svg")
    assert page.locator("#chart .scatterlayer .trace").count() == 1
