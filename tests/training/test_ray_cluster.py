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


@pytest.mark.parametrize("stopped_by_us, lost", [(True, None), (False, "still reports the job RUNNING")])
def test_a_job_still_running_at_the_end_is_stopped_and_our_cancel_that_had_not_taken_is_not_lost(
        tmp_path, monkeypatch, stopped_by_us, lost):
    """On a busy host Ray may still say RUNNING after our `ray job stop` gave up: the supervisor stops the job again
    and, for our own cancel, takes Ray's word after that stop; a job nobody stopped keeps its first word (lost)."""
    from training import ray_cluster, supervisor

    stops = tmp_path / "stops"
    said = iter(["RUNNING", "STOPPED"])
    monkeypatch.setattr(ray_cluster, "job_info", lambda address, sub_id: {
        "status": next(said), "error_type": "", "message": ""})
    launch = {"ray_job": {"address": "http://127.0.0.1:8265", "submission_id": "rlhf-1"},
              "cancel_argv": ["sh", "-c", f"echo stop >> {stops}"]}
    with open(tmp_path / "log.txt", "ab") as log:
        end = supervisor._ray_job_end(launch, stopped_by_us, log)
    assert stops.read_text() == "stop\n"
    assert end.get("lost") == lost if lost is None else lost in end["lost"]
