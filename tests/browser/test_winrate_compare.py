"""Honest win rates and what differs, driven in the browser: the run page's win-rate chart states its tie
rule and shows wins / ties / losses and "too few samples" in words; compare lists the settings that differ
and names each run by them in the legend."""
from __future__ import annotations

import pytest

from tests.browser.browser_helpers import PASSWORD, seed_project
from tests.browser_support import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def seeded(project, engineer, tmp_path):
    engineer.set_password(PASSWORD)
    engineer.save()
    return seed_project(project, engineer, tmp_path)


def _win_rate_points(job, steps_values):
    from webapp.runs.models import MetricPoint

    points = []
    for step, (wins, ties, losses) in steps_values:
        n = wins + ties + losses
        rate = (wins + 0.5 * ties) / n
        for key, value in [("win_rate", rate), ("win_rate_lo", max(0.0, rate - 0.35)),
                           ("win_rate_hi", min(1.0, rate + 0.3)), ("win_rate_n", n), ("win_rate_wins", wins),
                           ("win_rate_ties", ties), ("win_rate_losses", losses), ("accuracy", wins / n)]:
            points.append(MetricPoint(job=job, step=step, name=f"val-core/arith/{key}", value=value,
                                      wall_time=1.7e9 + step))
    MetricPoint.objects.bulk_create(points)


def test_win_rate_chart_shows_wins_ties_losses_the_tie_rule_and_a_wide_interval(page, live_server, engineer,
                                                                                  seeded, shot):
    job = seeded.job
    _win_rate_points(job, [(10, (0, 4, 0)), (20, (1, 3, 0))])  # the demo: 1 of 4 right, 3 "both wrong"
    login(page, live_server, engineer.username, PASSWORD)
    page.goto(f"{live_server.url}/p/acme/jobs/{job.pk}/")
    page.wait_for_selector("#chart-win_rate .ytick text")
    note = page.locator("#note-win_rate")
    note.wait_for()
    page.wait_for_function("document.getElementById('note-win_rate').textContent.includes('(step 20)')")
    text = note.inner_text()
    assert "Tie rule: a tie counts as half a win" in text
    assert "Latest win rate (step 20): 62.5% (W 1 · T 3 · L 0 of 4)" in text
    assert "Too few samples to trust this rate: only 4 judged pairs" in text
    names = page.evaluate("document.getElementById('chart-win_rate').data.map((t) => t.name || '')")
    assert any(n.startswith("wins (share") for n in names) and any(n.startswith("ties (share") for n in names)
    assert "accuracy" in names
    wins = page.evaluate("document.getElementById('chart-win_rate').data"
                         ".find((t) => (t.name || '').startsWith('wins')).y")
    assert wins == [0, 0.25]  # the share of wins, not the ½-tie rate
    hover = page.evaluate("document.getElementById('chart-win_rate').data.find((t) => t.customdata && "
                          "String(t.customdata[0]).startsWith('W ')).customdata")
    assert hover == ["W 0 · T 4 · L 0 of 4", "W 1 · T 3 · L 0 of 4"]
    shot(page, "win-rate-chart")
    page.get_by_role("tab", name="Checkpoints (1)").click()
    page.wait_for_selector("#mon-checkpoints [data-winrate]")
    cell = page.locator("#mon-checkpoints [data-winrate]").first.inner_text()
    assert "0 won · 4 tied · 0 lost of 4" in cell and "ties count ½" in cell


def test_compare_two_runs_that_differ_in_lr(page, live_server, engineer, seeded, shot):
    from webapp.runs.models import Job, MetricPoint

    a = seeded.job
    b = Job.objects.create(project=a.project, name=a.name, kind="grpo", state="succeeded", preset=a.preset,
                           config={**a.config, "hp": {**a.config["hp"], "lr": 5e-6}}, base_model=a.base_model,
                           dataset_version=a.dataset_version, created_by=engineer, last_step=20)
    MetricPoint.objects.bulk_create(MetricPoint(job=b, step=s, name="critic/score/mean", value=0.05 * s,
                                                wall_time=1.7e9 + s) for s in range(1, 21))
    login(page, live_server, engineer.username, PASSWORD)
    page.goto(f"{live_server.url}/p/acme/monitor/compare/")
    page.get_by_label(f"#{a.pk} {a.name}").check()
    page.get_by_label(f"#{b.pk} {b.name}").check()
    page.get_by_role("button", name="Choose these runs").click()
    page.wait_for_selector("#compare-chart .legendtext")
    legends = page.evaluate("[...document.querySelectorAll('#compare-chart .legendtext')].map((t) => t.textContent)")
    assert f"#{a.pk} grpo · lr 0.001" in legends and f"#{b.pk} grpo · lr 5e-06" in legends
    diff = page.locator("#compare-diff")
    rows = diff.locator("tr[data-diff-row]")
    assert rows.count() == 1 and "Learning rate (lr)" in rows.first.inner_text()
    assert "0.001" in rows.first.inner_text() and "5e-06" in rows.first.inner_text()
    same = page.locator("#compare-same")
    assert not same.locator("table").is_visible()  # collapsed
    same.locator("summary").click()
    assert same.get_by_text("KL coefficient (kl_coef)").is_visible()
    shot(page, "compare-diff")
