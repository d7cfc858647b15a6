"""Charts that read well: a constant series at its value, fractions on a 0–100 % axis, whole-number count axes."""
from __future__ import annotations

import re

import pytest

from tests.browser.browser_helpers import PASSWORD, seed_project
from tests.browser_support import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

TICKS_JS = "(id) => [...document.querySelectorAll('#' + id + ' .ytick text')].map((t) => t.textContent)"
RANGE_JS = "(id) => document.getElementById(id)._fullLayout.yaxis.range"


def _ticks(page, chart_id: str) -> list[str]:
    return page.evaluate(TICKS_JS, chart_id)


def _whole_numbers(ticks: list[str]) -> bool:
    return bool(ticks) and all(re.fullmatch(r"\d[\d,]*", t) for t in ticks) and len(set(ticks)) == len(ticks)


@pytest.fixture
def seeded(project, engineer, tmp_path):
    engineer.set_password(PASSWORD)
    engineer.save()
    return seed_project(project, engineer, tmp_path)


def test_constant_and_fraction_series(page, live_server, engineer, seeded, shot):
    from webapp.runs.models import MetricPoint

    job = seeded.job
    MetricPoint.objects.bulk_create(
        MetricPoint(job=job, step=s, name=name, value=value, wall_time=1.7e9 + s)
        for s in range(1, 21) for name, value in (("actor/lr", 1e-3), ("actor/pg_clipfrac", 0.0)))
    login(page, live_server, engineer.username, PASSWORD)
    page.goto(f"{live_server.url}/p/acme/jobs/{job.pk}/")
    page.wait_for_function("document.getElementById('chart-clipfrac') && "
                           "document.querySelector('#chart-lr .ytick text')")
    page.wait_for_function("document.querySelector('#chart-clipfrac .ytick text')")
    shot(page, "charts")

    lo, hi = page.evaluate(RANGE_JS, "chart-lr")
    assert 0 < lo < 1e-3 < hi < 1e-2, (lo, hi)  # around the value, not 0 ± 1
    assert "0.001" in _ticks(page, "chart-lr")
    assert set(page.evaluate("document.getElementById('chart-lr').data[0].y")) == {1e-3}

    lo, hi = page.evaluate(RANGE_JS, "chart-clipfrac")
    assert -0.05 < lo <= 0 and 1 <= hi < 1.05, (lo, hi)
    ticks = _ticks(page, "chart-clipfrac")
    assert ticks[0] == "0%" and ticks[-1] == "100%" and not any(t.startswith(("−", "-")) for t in ticks), ticks


def test_histogram_counts_are_whole_numbers(page, live_server, project, engineer, seeded, shot):
    from webapp.rewards.models import RewardTestRun

    login(page, live_server, engineer.username, PASSWORD)
    prefs = seeded.prefs
    page.goto(f"{live_server.url}/p/acme/datasets/{prefs.dataset_id}/v{prefs.number}/stats/")
    page.wait_for_selector("#chart-prompt_chars .ytick text")
    shot(page, "dataset-stats")
    for chart in ("chart-prompt_chars", "chart-response_chars", "chart-sources"):
        assert _whole_numbers(_ticks(page, chart)), (chart, _ticks(page, chart))

    scores = [1.0, 1.0, 0.0, 1.0, 0.5]
    run = RewardTestRun.objects.create(
        function=seeded.reward, source=seeded.reward.versions.first().source, sha256="0" * 64,
        mode="responses", sample_count=len(scores), summary={"all": {"n": 5, "scored": 5, "errors": 0}},
        results=[{"i": i, "score": v, "solution": str(v), "ground_truth": "1"} for i, v in enumerate(scores)])
    page.goto(f"{live_server.url}/p/acme/rewards/test-runs/{run.pk}/")
    page.wait_for_selector("[data-histogram] .ytick text")
    ticks = page.evaluate("[...document.querySelectorAll('[data-histogram] .ytick text')].map((t) => t.textContent)")
    assert _whole_numbers(ticks) and ticks[-1] == "3", ticks
    shot(page, "test-run")


OVERLAPS_JS = """() => [...document.querySelectorAll('#mon-charts .js-plotly-plot')].flatMap((div) => {
  const title = div.querySelector('.g-xtitle text'), legend = div.querySelector('.legend');
  if (!title || !legend) return [];
  const a = title.getBoundingClientRect(), b = legend.getBoundingClientRect();
  const figure = div.querySelector('.main-svg').getBoundingClientRect();
  // the legend wholly under the axis title, and inside the figure
  return b.top >= a.bottom && b.bottom <= figure.bottom + 1 ? [] : [[div.id, a.bottom, b.top, b.bottom, figure.bottom]];
})"""

# Every chart has been drawn again at the width of its (one-column) box.
RESIZED_JS = """() => [...document.querySelectorAll('#mon-charts .js-plotly-plot')].every((div) =>
  Math.abs(div._fullLayout.width - div.getBoundingClientRect().width) < 2)"""


def test_a_child_runs_legend_never_covers_the_x_axis_title(page, live_server, engineer, seeded, shot):
    """A rolled-back run draws its parent's curve too: the legend has two entries and sat on the axis title."""
    from webapp.runs.models import Checkpoint, Job, MetricPoint

    parent = seeded.job
    child = Job.objects.create(project=parent.project, name="child", kind="grpo", state="succeeded",
                               preset="demo-cpu", config=parent.config, base_model=parent.base_model,
                               dataset_version=parent.dataset_version, parent=parent, last_step=20,
                               resume_checkpoint=Checkpoint.objects.get(job=parent, step=10))
    MetricPoint.objects.bulk_create(MetricPoint(job=child, step=s, name=n, value=0.01 * s, wall_time=1.7e9 + s)
                                    for s in range(11, 21) for n in ("critic/score/mean", "actor/kl_loss"))
    login(page, live_server, engineer.username, PASSWORD)
    page.goto(f"{live_server.url}/p/acme/jobs/{child.pk}/", wait_until="domcontentloaded")
    page.wait_for_function("document.getElementById('chart-reward') && document.getElementById('chart-reward').data"
                           " && document.getElementById('chart-reward').data.some(t => (t.name || '')"
                           ".includes('before the branch')) && document.querySelector('#chart-reward .legend')")
    # the parent's curve is drawn: the legend has two entries
    shot(page, "child-charts")
    assert page.evaluate(OVERLAPS_JS) == []
    for mode in ("time", "relative"):  # two-line date ticks push the axis title down
        page.select_option("#mon-xaxis", mode)
        page.wait_for_function(f"document.getElementById('chart-reward')._fullLayout.xaxis.type === "
                               f"'{'date' if mode == 'time' else 'linear'}'")
        shot(page, f"child-charts-{mode}")
        assert page.evaluate(OVERLAPS_JS) == [], mode
    page.set_viewport_size({"width": 900, "height": 900})  # one column on a narrow window: the legend wraps
    page.wait_for_function(RESIZED_JS)  # Plotly redraws after the window's resize event, when it gets to it
    shot(page, "child-charts-narrow")
    assert page.evaluate(OVERLAPS_JS) == []
