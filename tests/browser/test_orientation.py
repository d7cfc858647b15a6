"""Orientation: the nav marks the current section, a new project page says what to do next until each first step
was done once, and the site has its own favicon (served locally)."""
from __future__ import annotations

import pytest

from tests.browser.browser_helpers import PASSWORD, REWARD_SOURCE, demo_files
from tests.browser_support import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CURRENT_JS = "() => [...document.querySelectorAll('nav.mainnav a[aria-current=page]')].map((a) => a.textContent.trim())"


def _steps(page) -> dict[str, str]:
    return {li.get_attribute("data-step"): li.get_attribute("class").strip()
            for li in page.locator(".first-steps li").all()}


def test_nav_first_steps_and_favicon(page, live_server, project, engineer, tmp_path, shot):
    from webapp.datasets.services import dataset_import
    from webapp.review import services as review
    from webapp.review.models import PairState
    from webapp.rewards.services import reward_function_create
    from webapp.runs.models import Job

    engineer.set_password(PASSWORD)
    engineer.save()
    login(page, live_server, engineer.username, PASSWORD)
    home = f"{live_server.url}/p/acme/"

    # A new project: the first step is named and linked; the nav says where we are.
    page.goto(home)
    assert page.evaluate(CURRENT_JS) == ["Overview"]
    assert page.locator(".first-steps h2").inner_text() == "Next: Import a dataset"
    assert _steps(page) == {"import": "next", "review": "", "reward": "", "launch": ""}
    shot(page, "new-project")
    page.locator(".first-steps h2 a").click()
    page.wait_for_url("**/datasets/upload/")
    assert page.evaluate(CURRENT_JS) == ["Datasets"]
    for path, section in (("jobs/models/", "Models"), ("monitor/compare/", "Compare"), ("review/", "Review"),
                          ("rewards/", "Reward functions"), ("jobs/", "Jobs")):
        page.goto(home + path)
        assert page.evaluate(CURRENT_JS) == [section], path

    # Each step done once moves "next" along.
    prefs_file, _ = demo_files(tmp_path)
    version = dataset_import(project=project, user=engineer, name="prefs", path=prefs_file)
    page.goto(home)
    assert page.locator(".first-steps h2").inner_text() == "Next: Review preference pairs"
    assert _steps(page) == {"import": "done", "review": "next", "reward": "", "launch": ""}
    review.ensure_pair_states(version=version)
    review.bulk_apply(actor=engineer, project=project, version=version,
                      row_ids=list(PairState.objects.filter(version=version).values_list("pk", flat=True)[:1]),
                      action="approve")
    reward_function_create(project=project, user=engineer, name="exact", source=REWARD_SOURCE)
    page.goto(home)
    assert page.locator(".first-steps h2").inner_text() == "Next: Launch a training job"
    Job.objects.create(project=project, name="first", kind="grpo", config={}, created_by=engineer)
    page.goto(home)
    assert page.locator(".first-steps").count() == 0  # every step done once: the list is gone

    # The favicon is the site's own, served by the app.
    icon = page.locator("link[rel=icon]").get_attribute("href")
    assert icon.startswith("/static/")
    resp = page.request.get(live_server.url + icon)
    assert resp.ok and "svg" in resp.headers["content-type"]
    assert page.request.get(f"{live_server.url}/favicon.ico").ok  # the default path redirects to it
