"""What a reward prints is kept with each sample's score in a test-run and shown beside it (page, API, CLI)."""
from __future__ import annotations

import pytest

from webapp.rewards.scoring import reward_file_check, reward_test_run_create

pytestmark = pytest.mark.django_db

TALKATIVE = '''\
print("module loaded")
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    if solution_str.strip() == "3":
        print("three <b>is</b> right")
        return 1.0
    return 0.0
'''


def test_a_test_run_keeps_what_the_reward_printed_beside_each_score(reward_fn, arith, engineer, as_user, api_for):
    run = reward_test_run_create(function=reward_fn, user=engineer, source=TALKATIVE, dataset_version=arith,
                                 responses_text="3\n5")
    assert [(r["score"], r["log"]) for r in run.results] == [(1.0, "three <b>is</b> right\n"), (0.0, None)]
    assert run.summary["load_log"] == "module loaded\n" and run.has_logs
    html = as_user(engineer).get(f"/p/{reward_fn.project.slug}/rewards/{reward_fn.pk}/?run={run.pk}").content.decode()
    assert "<th>Printed</th>" in html
    row = html[html.index(f'id="test-run-{run.pk}-sample-0"'):html.index(f'id="test-run-{run.pk}-sample-1"')]
    # beside the score, escaped
    assert row.index("1.0000") < row.index('<td class="reward-log"><pre>three &lt;b&gt;is&lt;/b&gt; right')
    assert "Printed while the reward loaded" in html and "module loaded" in html
    api = api_for(engineer).get(f"/api/projects/{reward_fn.project.slug}/rewards/test-runs/{run.pk}/")
    assert api.status_code == 200 and api.json()["results"][0]["log"] == "three <b>is</b> right\n"
    check = reward_file_check(source=TALKATIVE, dataset_version=arith, responses_text="3")  # the CLI's form
    assert check["results"][0]["log"] == "three <b>is</b> right\n"


def test_a_quiet_reward_has_no_printed_column(reward_fn, arith, engineer, as_user):
    run = reward_test_run_create(function=reward_fn, user=engineer, dataset_version=arith, responses_text="3\n5")
    assert not run.has_logs and all(r["log"] is None for r in run.results)
    html = as_user(engineer).get(f"/p/{reward_fn.project.slug}/rewards/{reward_fn.pk}/?run={run.pk}").content.decode()
    assert "<th>Printed</th>" not in html
