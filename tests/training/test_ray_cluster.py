"""Ray's word on a submitted job: which ends are the training's own and which mean the cluster lost it."""
from __future__ import annotations

import pytest

from training.ray_cluster import lost_reason


@pytest.mark.parametrize("info, stopped_by_us", [
    ({"status": "SUCCEEDED", "error_type": "", "message": ""}, False),
    ({"status": "STOPPED", "error_type": "", "message": "stopped"}, True),  # our cancel
    ({"status": "FAILED", "error_type": "JOB_ENTRYPOINT_COMMAND_ERROR", "message": "exit code 1"}, False),
])
def test_a_job_that_ended_on_its_own_or_by_our_cancel_is_not_lost(info, stopped_by_us):
    assert lost_reason(info, stopped_by_us) is None


@pytest.mark.parametrize("info, words", [
    (None, "no record of the job"),
    ({"status": "STOPPED", "error_type": "", "message": "Job was intentionally stopped."},
     "stopped on the Ray cluster"),
    ({"status": "FAILED", "error_type": "JOB_SUPERVISOR_ACTOR_DIED", "message": "node died"},
     "JOB_SUPERVISOR_ACTOR_DIED"),
    ({"status": "RUNNING", "error_type": "", "message": ""}, "still reports the job RUNNING"),
])
def test_a_job_ray_reports_dead_for_another_reason_is_lost(info, words):
    assert words in lost_reason(info, stopped_by_us=False)
