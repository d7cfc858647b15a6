"""In a real browser, on a real short demo run: the run page's reward-component curves, and re-scoring the
run's stored samples with another reward version (a real worker scores them)."""
from __future__ import annotations

import pytest

from tests.browser_support import login
from tests.webapp.demo_run import LENIENT_SOURCE, train_demo_job
from tests.webapp.monitoring.conftest import fake_supervisor, no_enqueue, tiny_model_dir  # noqa: F401 - fixtures

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "pw-for-tests-1"
TRACES = "(id) => document.getElementById(id).data.filter(t => t.name).map(t => t.name)"


@pytest.fixture
def trained(transactional_db, project, engineer, tiny_model_dir, no_enqueue, fake_supervisor):  # noqa: F811
    return train_demo_job(project, engineer, tiny_model_dir)


def test_the_run_page_draws_each_reward_component_next_to_the_optimised_total(page, live_server, trained, shot):
    from webapp.runs.models import MetricPoint

    login(page, live_server, "erin", PASSWORD)
    page.goto(f"{live_server.url}/p/acme/jobs/{trained.pk}/")
    page.wait_for_function("document.getElementById('chart-reward_errors') && "
                           "document.getElementById('chart-reward_errors').data && "
                           "document.getElementById('chart-reward_components').data")
    shot(page, "reward-components")
    names = page.evaluate(TRACES, "chart-reward_components")
    for label in ("total (optimised)", "exact_match_v1", "shape_v1"):
        assert any(n == label or n.startswith(f"{label} (") for n in names), names
    # the total drawn is the logged advantages' input, step by step
    total = dict(MetricPoint.objects.filter(job=trained, name="critic/rewards/mean").values_list("step", "value"))
    drawn = page.evaluate("(() => { const d = document.getElementById('chart-reward_components').data;"
                          " return d.find(t => t.name === 'total (optimised) (raw)')"
                          " || d.find(t => t.name === 'total (optimised)'); })()")
    assert dict(zip(drawn["x"], drawn["y"], strict=True)) == pytest.approx(total)
    errors = page.evaluate("document.getElementById('chart-reward_errors').data"
                           ".filter(t => t.name && t.name.startsWith('shape_v1')).flatMap(t => t.y)")
    assert errors and max(errors) > 0  # the shape reward raised on some answers
    assert page.locator("#chart-reward_extras").count() == 1  # its dict's "chars"


def test_an_engineer_rescores_stored_samples_and_compares_old_and_new(page, live_server, trained, celery_worker_proc,
                                                                     project, engineer, shot):
    from playwright.sync_api import expect

    from webapp.rewards.models import RewardFunction
    from webapp.rewards.services import reward_version_save
    from webapp.runs.models import Rescore

    fn = RewardFunction.objects.get(project=project, name="exact-match")
    reward_version_save(function=fn, user=engineer, source=LENIENT_SOURCE, message="one off counts")
    login(page, live_server, "erin", PASSWORD)
    page.goto(f"{live_server.url}/p/acme/jobs/{trained.pk}/")
    page.click("#rescore-link")
    page.get_by_label("Reward version").select_option(label="exact-match v2")
    page.get_by_label("Steps").fill("2-3")
    page.get_by_role("button", name="Re-score").click()
    expect(page.locator("#rescore-state")).to_have_text("succeeded")
    rescore = Rescore.objects.get()
    assert rescore.component == "exact_match_v1" and rescore.steps == [2, 3] and rescore.done_count == 256
    share = round(100 * rescore.changed_count / rescore.done_count)
    expect(page.locator("#rescore-changed")).to_contain_text(f"{share}% of the samples changed")
    assert 0 < rescore.changed_count < 256
    shot(page, "rescore")

    page.get_by_label("Show").select_option("changed")
    page.get_by_label("Sort by").select_option(label="Largest rise")
    page.get_by_role("button", name="Apply").click()
    expect(page.locator("#rescore-count")).to_have_text(f"{rescore.changed_count} samples" if rescore.changed_count > 1
                                                        else "1 sample")
    rows = page.locator("#rescore-samples tbody tr")
    assert rows.count() == min(100, rescore.changed_count)
    assert all("changed" in (c or "") for c in rows.evaluate_all("rs => rs.map(r => r.className)"))
    deltas = [float(t.replace("+", "")) for t in
              rows.evaluate_all("rs => rs.map(r => r.querySelectorAll('td')[5].textContent.trim())")]
    assert deltas == sorted(deltas, reverse=True)

    page.get_by_label("Show").select_option("all")
    page.get_by_label("Step").fill("3")
    page.get_by_role("button", name="Apply").click()
    page.wait_for_url(lambda url: "step=3" in url)
    expect(page.locator("#rescore-count")).to_have_text("128 samples")
    steps = rows.evaluate_all("rs => rs.map(r => r.dataset.step)")
    assert len(steps) == 100 and set(steps) == {"3"}
