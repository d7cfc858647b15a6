"""The reward editor in a real browser: create from the editor, test-run, marked lines, histogram, save check."""
from __future__ import annotations

import pytest

from tests.browser_support import login, start_test_run
from webapp.rewards.models import RewardFunction

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

RAISES_ON_WORDS = """def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    value = int(solution_str)
    return {"score": float(value == int(ground_truth)), "value": value}
"""


def set_code(pg, text: str) -> None:
    pg.evaluate("(t) => document.querySelector('.CodeMirror').CodeMirror.setValue(t)", text)


def marked_lines(pg) -> list[int]:
    """1-based lines the editor marks as failing."""
    return pg.evaluate("""() => { const cm = document.querySelector('.CodeMirror').CodeMirror; const out = [];
        cm.eachLine((h) => { if ((h.bgClass || '').includes('cm-error-line')) out.push(cm.getLineNumber(h) + 1); });
        return out; }""")


def test_write_test_run_and_save_in_the_browser(page, live_server, engineer, arith, shot,  # noqa: F811
                                             celery_worker_proc):  # test-runs are scored on a worker
    login(page, live_server, "erin", "pw-for-tests-1")
    page.route("**/*", lambda route: route.abort() if not route.request.url.startswith(live_server.url)
               else route.continue_())  # everything is served locally: no CDN
    page.goto(f"{live_server.url}/p/acme/rewards/new/")
    page.wait_for_selector(".CodeMirror .CodeMirror-linenumber")
    assert page.locator(".CodeMirror .cm-keyword").count() > 0  # syntax highlighting of the template
    page.fill("#id_name", "int-match")
    set_code(page, RAISES_ON_WORDS)
    page.click("button:has-text('Create version 1')")
    page.wait_for_url("**/rewards/*/")
    fn = RewardFunction.objects.get(name="int-match")
    assert fn.latest_version.source == RAISES_ON_WORDS

    # test-run the editor's text on two dataset rows, one answer is not a number
    page.select_option("#id_dataset_version", str(arith.pk))
    page.fill("#id_responses", "3\nfour")
    start_test_run(page)
    page.wait_for_selector(".test-run-results .per-sample")
    page.wait_for_selector(".test-run-results .js-plotly-plot .main-svg")
    rows = page.locator(".per-sample tbody tr")
    assert rows.count() == 2
    assert "1.0000" in rows.nth(0).inner_text() and "value" in rows.nth(0).inner_text()
    assert "ValueError" in rows.nth(1).inner_text() and "line 2" in rows.nth(1).inner_text()
    assert marked_lines(page) == [2]
    assert "Done: 2 samples" in page.locator("#test-run-status").inner_text()
    shot(page, "test-run")

    # a syntax error is refused on save, with the line marked in the editor
    set_code(page, RAISES_ON_WORDS.replace("value = int(solution_str)", "value = int(solution_str"))
    page.click("button:has-text('Save as new version')")
    page.wait_for_selector("#source-error")
    page.wait_for_selector(".CodeMirror .CodeMirror-linenumber")
    assert "Not saved. Line 2" in page.locator("#source-error").inner_text()
    assert marked_lines(page) == [2]
    assert fn.versions.count() == 1

    # the Check button reports without saving; Esc leaves the editor for keyboard users
    page.click("#check-button")
    page.wait_for_selector("#check-output li")
    assert "Line 2" in page.locator("#check-output").inner_text()
    page.click(".CodeMirror-code")
    page.keyboard.press("Escape")
    assert page.evaluate("document.activeElement.closest('.CodeMirror') === null")
