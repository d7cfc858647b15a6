"""Where bubblewrap cannot run, a test-run is refused with why and how to fix it, the reward page and /healthz
say reward code does not run here, and each worker's heartbeat tells the page its own isolation."""
from __future__ import annotations

import pytest

from webapp.core import workers
from webapp.rewards.models import RewardTestRunState
from webapp.rewards.scoring import reward_file_check, reward_test_run_create

pytestmark = pytest.mark.django_db


def marker_source(marker) -> str:
    return (f"open({str(marker)!r}, 'w').write('ran')\n"
            "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"
            "    return 1.0\n")


def test_a_test_run_is_refused_and_its_page_says_why_and_how_to_fix_it(broken_bwrap, reward_fn, arith, engineer,
                                                                       as_user, tmp_path):
    marker = tmp_path / "ran"
    run = reward_test_run_create(function=reward_fn, user=engineer, source=marker_source(marker),
                                 dataset_version=arith, limit=3)
    assert run.state == RewardTestRunState.FAILED and run.isolation == "refused" and run.results == []
    assert "Reward code was not run" in run.error and "setting up uid map: Permission denied" in run.error
    assert "apt-get install bubblewrap" in run.error and "REWARD_SANDBOX_ALLOW_UNISOLATED" in run.error
    assert not marker.exists()
    html = as_user(engineer).get(f"/p/{reward_fn.project.slug}/rewards/{reward_fn.pk}/?run={run.pk}").content.decode()
    assert "Sandbox isolation: refused — reward code does not run here." in html
    assert "setting up uid map: Permission denied" in html and "apt-get install bubblewrap" in html
    check = reward_file_check(source=marker_source(marker), dataset_version=arith, limit=2)  # the CLI's form
    assert not check["ok"] and check["isolation"] == "refused" and "Reward code was not run" in check["error"]
    assert not marker.exists()


def test_healthz_says_which_isolation_reward_code_gets_here_and_on_each_worker(client, settings, tmp_path):
    settings.WORKER_HEARTBEAT_DIR = tmp_path / "beats"
    workers.beat("usercode@h0st7", {"queues": ["usercode"], "sandbox": {"mode": "bubblewrap", "ok": True}})
    workers.beat("celery@h0st7", {"queues": ["cpu"], "sandbox": {"mode": "refused", "ok": False, "reason": "no bwrap"}})
    text = client.get("/healthz").content.decode()
    assert text.splitlines()[:2] == ["ok", "reward sandbox here: bubblewrap"]
    assert "reward sandbox on a worker of usercode: bubblewrap" in text
    assert "reward sandbox on a worker of cpu: refused" in text
    assert "h0st7" not in text  # no host names on a page without a login


def test_healthz_and_the_reward_page_say_when_reward_code_is_refused(broken_bwrap, client, as_user, engineer,
                                                                     reward_fn, settings, tmp_path):
    settings.WORKER_HEARTBEAT_DIR = tmp_path / "beats"
    workers.beat("usercode@box", {"queues": ["usercode"], "sandbox": {"mode": "refused", "ok": False,
                                                                      "reason": "bwrap is not installed"}})
    assert client.get("/healthz").content.decode().splitlines()[:2] == ["ok", "reward sandbox here: refused"]
    html = as_user(engineer).get(f"/p/{reward_fn.project.slug}/rewards/{reward_fn.pk}/").content.decode()
    assert 'data-mode="refused"' in html and "REWARD_SANDBOX_ALLOW_UNISOLATED" in html
    assert "Worker usercode@box (usercode): refused — reward code does not run there: bwrap is not installed" in html
