"""The KL guard (the health rule "kl") end to end: metrics lines -> the runs app's sync -> hooks.after_sync ->
stop or restore. One engine, one record (GuardRulesRecord), one event kind ("guard_rule")."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from webapp.core.models import AuditLog
from webapp.monitoring.hooks import after_sync
from webapp.monitoring.models import GuardRulesRecord
from webapp.runs.models import Job, JobAttempt, MetricPoint, RunEvent
from webapp.runs.services import sync_job

pytestmark = pytest.mark.django_db
KL = "actor/kl_loss"


def _guard(job: Job, **kw) -> Job:
    cfg = dict(job.config)
    cfg["guard_rules"] = [{"rule": "kl", "threshold": 0.1, "patience": 2, "action": "restore", "lr_factor": 0.5,
                           "max_restores": 2, **kw}]
    Job.objects.filter(pk=job.pk).update(config=cfg)
    job.refresh_from_db()
    return job


def _log(job: Job, attempt: int, kl_by_step: dict[int, float]) -> None:
    adir = Path(job.run_dir) / "attempts" / str(attempt)
    adir.mkdir(parents=True, exist_ok=True)
    with open(adir / "metrics.jsonl", "a") as fh:
        for step, kl in kl_by_step.items():
            fh.write(json.dumps({"step": step, "data": {KL: kl, "critic/score/mean": 0.5}}) + "\n")
    (adir / "heartbeat").write_text(json.dumps({"time": time.time(), "pid": 1}))


def test_a_kl_spike_restores_the_last_good_checkpoint_with_a_smaller_lr(launched_job, checkpoint):
    job = _guard(launched_job())
    checkpoint(job, 5)
    c10 = checkpoint(job, 10)
    _log(job, 1, dict.fromkeys(range(1, 11), 0.02))
    sync_job(job)
    assert not RunEvent.objects.filter(job=job, kind="guard_rule").exists()
    _log(job, 1, {11: 0.3, 12: 0.45})
    sync_job(job)
    # the trip (with the values that caused it), then the runs app's resume event at the restored step
    ev, resumed = RunEvent.objects.filter(job=job, kind="guard_rule").order_by("id")
    assert resumed.step == 10 and resumed.data["attempt"] == 2
    assert ev.step == 12 and ev.data["values"] == [[11, 0.3], [12, 0.45]] and ev.data["to_step"] == 10
    assert ev.data["rule"] == "kl" and ev.data["metric"] == KL
    assert ev.data["hp"] == {"lr": pytest.approx(5e-4)} and ev.data["checkpoint"] == c10.pk
    job.refresh_from_db()
    assert job.config["hp"]["lr"] == pytest.approx(5e-4) and job.state == "queued"
    attempt = JobAttempt.objects.get(job=job, number=2)
    assert attempt.reason == "guard_rule" and attempt.resume_from == c10.path
    assert (Path(job.run_dir) / "attempts" / "1" / "CANCEL").exists()  # the old attempt is told to stop
    entry = AuditLog.objects.get(action="guard_rule.restore")
    assert entry.actor is None and entry.after["to_step"] == 10 and entry.before["values"][0] == [11, 0.3]
    assert GuardRulesRecord.objects.get(job=job).state["rules"]["kl"]["restores"] == 1
    # the restored step is protected from retention while the new attempt reads it
    assert 10 in json.loads((Path(job.run_dir) / "checkpoints" / "protected.json").read_text())


def test_stop_action_cancels_the_run(launched_job, checkpoint):
    job = _guard(launched_job(), action="stop", patience=3)
    _log(job, 1, {1: 0.02, 2: 0.5, 3: 0.6, 4: 0.7})
    sync_job(job)
    job.refresh_from_db()
    assert job.cancel_requested
    ev = RunEvent.objects.get(job=job, kind="guard_rule")
    assert ev.data["action"] == "stop" and "stopping the run" in ev.message
    assert AuditLog.objects.filter(action="guard_rule.stop").exists()
    assert not JobAttempt.objects.filter(job=job, number=2).exists()


def test_disabled_guard_and_other_metrics_do_nothing(launched_job):
    job = _guard(launched_job(), enabled=False)
    _log(job, 1, {1: 5.0, 2: 5.0, 3: 5.0})
    sync_job(job)
    assert not RunEvent.objects.filter(job=job, kind="guard_rule").exists()
    job = _guard(job)
    after_sync(job, [(4, "actor/other_kl", 9.0), (5, "actor/other_kl", 9.0)])
    assert not RunEvent.objects.filter(job=job, kind="guard_rule").exists()


def test_an_invalid_guard_declaration_is_ignored_not_a_crash(launched_job):
    job = _guard(launched_job(), action="explode")
    after_sync(job, [(1, KL, 9.0), (2, KL, 9.0), (3, KL, 9.0)])
    assert not RunEvent.objects.filter(job=job, kind="guard_rule").exists()


def test_no_good_checkpoint_means_stop(launched_job, checkpoint):
    job = _guard(launched_job())
    checkpoint(job, 3, metrics={KL: 0.9})  # saved while KL was already too high
    after_sync(job, [(1, KL, 0.2), (2, KL, 0.3)])
    ev = RunEvent.objects.get(job=job, kind="guard_rule")
    assert ev.data["action"] == "stop" and "no checkpoint" in ev.message


def test_the_dying_attempts_last_points_do_not_trip_the_restored_run(launched_job, checkpoint):
    job = _guard(launched_job(), max_restores=5)
    checkpoint(job, 10)
    first = MetricPoint.objects.bulk_create([MetricPoint(job=job, step=s, name=KL, value=v, attempt=1)
                                             for s, v in [(9, 0.01), (10, 0.01), (11, 0.5), (12, 0.5)]])
    after_sync(job, first)
    assert GuardRulesRecord.objects.get(job=job).state["phase"] == "restoring"
    Job.objects.filter(pk=job.pk).update(state="running")
    job.refresh_from_db()
    # one sync carries attempt 1's last (high) lines and attempt 2's first (healthy) ones
    mixed = [MetricPoint(job=job, step=s, name=KL, value=v, attempt=a)
             for s, v, a in [(13, 0.9, 1), (14, 0.9, 1), (11, 0.02, 2), (12, 0.03, 2)]]
    after_sync(job, mixed)
    state = GuardRulesRecord.objects.get(job=job).state
    assert state["phase"] == "watching" and state["rules"]["kl"]["restores"] == 1 and state["last_step"] == 12
    assert RunEvent.objects.filter(job=job, kind="guard_rule", data__action="restore").count() == 1


def test_the_guards_restore_target_is_protected_from_retention(launched_job, checkpoint, points):
    from webapp.monitoring.services import protected_steps

    job = _guard(launched_job(), patience=3)
    for step in (2, 4, 6):
        checkpoint(job, step)
    after_sync(job, points(job, KL, [0.01, 0.02, 0.05, 0.08, 0.3, 0.4]))  # steps 1..6: 4 is the last within 0.1
    assert not RunEvent.objects.filter(job=job, kind="guard_rule").exists()  # two steps above: not tripped yet
    assert protected_steps(job) == {4}
    job = _guard(job, action="stop")
    assert protected_steps(job) == set()


def test_a_kl_spike_rule_restores_with_the_next_seed(launched_job, checkpoint):
    """kl_spike: a z-score over the last values; restore with new_seed keeps the lr and draws other rollouts."""
    job = launched_job()
    cfg = dict(job.config)
    cfg["guard_rules"] = [{"rule": "kl_spike", "window": 5, "action": "restore", "new_seed": True}]
    Job.objects.filter(pk=job.pk).update(config=cfg)
    job.refresh_from_db()
    seed, lr = job.config["hp"]["seed"], job.config["hp"]["lr"]
    c6 = checkpoint(job, 6)
    _log(job, 1, {1: 0.010, 2: 0.012, 3: 0.011, 4: 0.009, 5: 0.010, 6: 0.011, 7: 0.25})
    sync_job(job)
    ev = RunEvent.objects.filter(job=job, kind="guard_rule").order_by("id").first()
    assert ev.step == 7 and ev.data["rule"] == "kl_spike" and ev.data["to_step"] == 6
    assert ev.data["hp"] == {"seed": seed + 1} and ev.data["checkpoint"] == c6.pk
    job.refresh_from_db()
    assert job.config["hp"]["seed"] == seed + 1 and job.config["hp"]["lr"] == lr
    assert JobAttempt.objects.get(job=job, number=2).resume_from == c6.path
