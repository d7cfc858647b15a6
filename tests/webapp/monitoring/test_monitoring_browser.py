"""The job monitor in a real browser: live curves, threshold, zoom re-fetch, samples, one-click rollback."""
from __future__ import annotations

import numpy as np
import pytest

from tests.browser_support import login
from webapp.runs.models import Job, MetricPoint, RunEvent

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "pw-for-tests-1"
KL = "actor/kl_loss"


def _add(job, name, values, start=1):
    MetricPoint.objects.bulk_create([MetricPoint(job=job, step=start + i, name=name, value=float(v),
                                                 wall_time=1.7e9 + start + i) for i, v in enumerate(values)],
                                    batch_size=5000)


def _trace_len(pg, chart_id: str) -> int:
    return pg.evaluate(f"document.getElementById('{chart_id}').data.find(t => t.name && !t.yaxis).x.length")


def test_job_monitor_live_zoom_samples_and_rollback(page, live_server, launched_job, checkpoint, samples,  # noqa: F811
                                                   engineer, shot):  # noqa: F811
    job = launched_job()
    _add(job, "critic/score/mean", np.linspace(0, 0.5, 50))
    _add(job, "critic/score/min", np.zeros(50))
    _add(job, "critic/score/max", np.ones(50))
    kl = np.full(20_000, 0.02)
    kl[15_000] = 0.9  # a spike deep inside a long series
    _add(job, KL, kl)
    Job.objects.filter(pk=job.pk).update(last_step=20_000)
    checkpoint(job, 20)
    RunEvent.objects.create(job=job, kind="guard_rule", step=40, message="kl: KL above 0.1 for 3 steps",
                            data={"rule": "kl", "metric": KL, "action": "restore"})
    samples(job, 20, [{"input": "2+2=<b>", "output": "4", "score": 1.0, "reference": "5", "reference_score": 0.0,
                       "win": 1.0}])

    login(page, live_server, "erin", PASSWORD)
    page.goto(f"{live_server.url}/p/acme/jobs/{job.pk}/")
    page.wait_for_function("document.getElementById('chart-kl') && document.getElementById('chart-kl').data")
    page.wait_for_function("document.getElementById('mon-status').textContent.includes('step 20000')")
    # the spike survives downsampling and the guard threshold is drawn
    assert page.evaluate("Math.max(...document.getElementById('chart-kl').data[0].y)") == pytest.approx(0.9)
    shapes = page.evaluate("document.getElementById('chart-kl').layout.shapes.map(s => s.y0)")
    assert job.config["guard_rules"][0]["threshold"] in shapes  # the KL guard's threshold line
    full = _trace_len(page, "chart-kl")
    assert full < 3000
    shot(page, "curves")

    # zoom: the visible range is re-read at full resolution
    page.evaluate("Plotly.relayout('chart-kl', {'xaxis.range[0]': 15000, 'xaxis.range[1]': 15400})")
    page.wait_for_function("document.getElementById('chart-kl').data[0].x[0] >= 15000")
    zoomed = page.evaluate("document.getElementById('chart-kl').data[0].x")
    assert zoomed == list(range(15_000, 15_401))  # every step of the visible range
    # a resize (a full-page screenshot makes one) redraws the zoomed chart with its points, not the coarse ones
    page.evaluate("document.getElementById('chart-kl').on('plotly_relayout', (ev) => {"
                  " if (ev.autosize) window.__resized = true; })")
    page.set_viewport_size({"width": 1100, "height": 900})
    page.wait_for_function("window.__resized === true")
    assert page.evaluate("document.getElementById('chart-kl').data[0].x") == zoomed
    page.set_viewport_size({"width": 1400, "height": 900})

    # live: new points appear without a reload
    _add(job, "critic/score/mean", [0.9, 0.95], start=20_001)
    Job.objects.filter(pk=job.pk).update(last_step=20_002)
    page.wait_for_function("document.getElementById('mon-status').textContent.includes('step 20002')")
    assert page.evaluate("document.getElementById('chart-reward').data.some(t => t.y.includes(0.95))")

    # samples tab: escaped, side by side with the reference
    page.click("#tab-samples")
    page.wait_for_selector("#mon-samples-body .mon-sample")
    assert "2+2=<b>" in page.inner_text("#mon-samples-body")

    # a checkpoint saved while we watch joins the table without a reload (and its buttons work)
    page.evaluate("window.__sameDocument = true")
    assert page.inner_text("#tab-checkpoints") == "Checkpoints (1)"
    checkpoint(job, 20_000)
    page.wait_for_function("document.getElementById('tab-checkpoints').textContent === 'Checkpoints (2)'")
    assert page.evaluate("window.__sameDocument") is True

    # one-click rollback with a confirm dialog
    page.click("#tab-checkpoints")
    assert page.locator("a.js-rollback[data-step='20000']").count() == 1
    page.click("a.js-rollback[data-step='20']")
    page.wait_for_selector("#mon-rollback[open]")
    page.fill("#mon-rollback textarea", "KL spike at 15000")
    page.fill("#mon-rollback input[name=lr]", "0.0005")
    shot(page, "rollback-dialog")
    page.click("#mon-rollback button[type=submit]")
    page.wait_for_url(lambda url: f"/jobs/{job.pk}/" not in url and "/jobs/" in url)
    child = Job.objects.get(parent=job)
    assert child.resume_checkpoint.step == 20 and child.config["hp"]["lr"] == 0.0005
    assert f"/p/acme/jobs/{child.pk}/" in page.url  # the runs app's job page, with this panel in it
    # the child's curves continue from the parent's, up to the branch step
    page.wait_for_function("(document.getElementById('chart-reward')?.data || [])"
                           ".some(t => t.name.includes('before the branch'))")
    xs = page.evaluate("document.getElementById('chart-reward').data.find(t => t.name.includes('before the branch')).x")
    assert xs[0] == 1 and xs[-1] == 20
    page.click("#tab-checkpoints")
    assert "branched at step 20" in page.inner_text("#mon-checkpoints")
    shot(page, "child")
