"""Health rules end to end: metrics lines -> sync -> hooks.after_sync -> warn / restore / branch / stop."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from webapp.core.models import AuditLog
from webapp.monitoring.charts import default_charts
from webapp.monitoring.hooks import after_sync
from webapp.monitoring.models import GuardRulesRecord
from webapp.monitoring.services import rules_status
from webapp.runs.models import Job, JobAttempt, RunEvent
from webapp.runs.services import sync_job

pytestmark = pytest.mark.django_db


def _rules(job: Job, *rules) -> Job:
    cfg = dict(job.config)
    cfg["guard_rules"] = list(rules)
    Job.objects.filter(pk=job.pk).update(config=cfg)
    job.refresh_from_db()
    return job


def _log(job: Job, attempt: int, rows: dict[int, dict[str, float]]) -> None:
    adir = Path(job.run_dir) / "attempts" / str(attempt)
    adir.mkdir(parents=True, exist_ok=True)
    with open(adir / "metrics.jsonl", "a") as fh:
        for step, data in rows.items():
            fh.write(json.dumps({"step": step, "data": {"critic/score/mean": 0.5, **data}}) + "\n")
    (adir / "heartbeat").write_text(json.dumps({"time": time.time(), "pid": 1}))


def test_entropy_collapse_restores_the_newest_checkpoint_where_every_rule_held(launched_job, checkpoint):
    job = _rules(launched_job(), {"rule": "entropy_collapse", "warmup": 3, "patience": 2, "action": "restore",
                                  "lr_factor": 0.5},
                 {"rule": "response_clipping", "warmup": 0, "patience": 5})
    checkpoint(job, 4)
    c6 = checkpoint(job, 6)
    checkpoint(job, 8)
    rows = {s: {"actor/entropy": 2.0, "response_length/clip_ratio": 0.0} for s in range(1, 9)}
    rows[8]["response_length/clip_ratio"] = 0.9  # checkpoint 8 was saved while a rule was violated
    _log(job, 1, rows)
    sync_job(job)
    assert [s["status"] for s in rules_status(job)] == ["ok", "ok"]
    _log(job, 1, {9: {"actor/entropy": 0.5}, 10: {"actor/entropy": 0.4}})
    sync_job(job)
    # the trip, then the runs app's resume event at the restored step
    ev, resumed = RunEvent.objects.filter(job=job, kind="guard_rule").order_by("id")
    assert resumed.step == 6 and resumed.data["attempt"] == 2
    assert ev.step == 10 and ev.data["rule"] == "entropy_collapse" and ev.data["action"] == "restore"
    assert ev.data["to_step"] == 6 and ev.data["checkpoint"] == c6.pk and ev.data["values"] == [[9, 0.5], [10, 0.4]]
    job.refresh_from_db()
    assert job.config["hp"]["lr"] == pytest.approx(ev.data["hp"]["lr"]) and job.state == "queued"
    attempt = JobAttempt.objects.get(job=job, number=2)
    assert attempt.reason == "guard_rule" and attempt.resume_from == c6.path
    entry = AuditLog.objects.get(action="guard_rule.restore")
    assert entry.actor is None and entry.after["to_step"] == 6 and entry.before["rule"] == "entropy_collapse"
    assert {s["name"]: s["status"] for s in rules_status(job)}["entropy_collapse"] == "tripped"
    assert job.config["guard_rules"][0]["rule"] == "entropy_collapse"  # the rules survive the restore


def test_warn_records_the_trip_and_the_run_goes_on(launched_job):
    job = _rules(launched_job(), {"rule": "zero_variance_groups", "warmup": 1, "patience": 2})
    _log(job, 1, {1: {"critic/zero_variance_group_share": 1.0}, 2: {"critic/zero_variance_group_share": 0.95},
                  3: {"critic/zero_variance_group_share": 1.0}})
    sync_job(job)
    ev = RunEvent.objects.get(job=job, kind="guard_rule")
    assert ev.step == 3 and ev.data["action"] == "warn" and "zero_variance_group_share above 0.9" in ev.message
    job.refresh_from_db()
    assert not job.cancel_requested and not JobAttempt.objects.filter(job=job, number=2).exists()
    assert AuditLog.objects.filter(action="guard_rule.warn").exists()
    assert GuardRulesRecord.objects.get(job=job).trips == 1


def test_a_trip_is_recorded_whole_or_not_at_all(launched_job, monkeypatch):
    """The run's event and the audit entry of a trip go together: a reader that sees one sees the other."""
    from webapp.monitoring.services import guard

    def audit_store_down(**kwargs):
        raise RuntimeError("the audit log cannot be written")

    monkeypatch.setattr(guard, "audit", audit_store_down)
    job = _rules(launched_job(), {"rule": "zero_variance_groups", "warmup": 1, "patience": 2})
    _log(job, 1, {1: {"critic/zero_variance_group_share": 1.0}, 2: {"critic/zero_variance_group_share": 0.95},
                  3: {"critic/zero_variance_group_share": 1.0}})
    sync_job(job)  # the guard's failure is logged; the sync goes on
    assert not RunEvent.objects.filter(job=job, kind="guard_rule").exists()


def test_branch_starts_a_child_from_the_checkpoint_and_the_parent_continues(launched_job, checkpoint):
    job = _rules(launched_job(), {"rule": "kl", "threshold": 0.1, "patience": 1, "action": "branch",
                                  "lr_factor": 0.5, "max_restores": 1})
    c2 = checkpoint(job, 2)
    _log(job, 1, {1: {"actor/kl_loss": 0.01}, 2: {"actor/kl_loss": 0.02}, 3: {"actor/kl_loss": 0.5}})
    sync_job(job)
    child = Job.objects.get(parent=job)
    assert child.resume_checkpoint_id == c2.pk
    assert child.config["hp"]["lr"] == pytest.approx(job.config["hp"]["lr"] * 0.5)
    job.refresh_from_db()
    assert job.state not in ("cancelled", "queued") and not job.cancel_requested
    ev = RunEvent.objects.get(job=job, kind="guard_rule")
    assert ev.data["action"] == "branch" and "branching a child run from step 2" in ev.message


def test_stop_cancels_and_a_bad_declaration_disables_the_rules(launched_job):
    job = _rules(launched_job(), {"rule": "grad_norm_spike", "window": 3, "threshold": 3, "action": "stop"})
    _log(job, 1, {1: {"actor/grad_norm": 1.0}, 2: {"actor/grad_norm": 1.2}, 3: {"actor/grad_norm": 0.9},
                  4: {"actor/grad_norm": 40.0}})
    sync_job(job)
    job.refresh_from_db()
    assert job.cancel_requested
    assert RunEvent.objects.get(job=job, kind="guard_rule").data["action"] == "stop"
    other = _rules(launched_job(), {"rule": "no_such_rule"})
    _log(other, 1, {1: {"actor/grad_norm": 1.0}})
    sync_job(other)
    assert rules_status(other) == [] and not RunEvent.objects.filter(job=other, kind="guard_rule").exists()


def test_the_run_page_and_the_live_poll_show_each_rules_state(make_job, points, viewer, as_user, api_for):
    from tests.webapp.monitoring.conftest import default_config

    cfg = {**default_config(), "guard_rules": [{"rule": "kl", "threshold": 0.1, "patience": 1, "action": "warn"},
                                               {"rule": "entropy_collapse", "warmup": 50}]}
    job = make_job(config=cfg)
    after_sync(job, points(job, "actor/kl_loss", [0.01, 0.5]) + points(job, "actor/entropy", [1.0, 1.0]))
    page = as_user(viewer).get(f"/p/{job.project.slug}/jobs/{job.pk}/").content.decode()
    assert 'id="mon-rules"' in page and "monitor-rules.js" in page
    assert 'data-rule="kl"' in page and "mon-rule-tripped" in page and "tripped 1×" in page
    assert "mon-rule-warming_up" in page and "actor/kl_loss above 0.1 → warn" in page
    body = api_for(viewer).get(f"/api/projects/{job.project.slug}/monitor/jobs/{job.pk}/live/",
                               {"names": "actor/kl_loss"}).json()
    assert {r["name"]: r["status"] for r in body["rules"]} == {"kl": "tripped", "entropy_collapse": "warming_up"}
    trip = [e for e in body["events"] if e["kind"] == "guard_rule"]
    assert trip and trip[0]["data"]["metric"] == "actor/kl_loss" and trip[0]["step"] == 2


def test_the_kl_chart_draws_the_kl_guards_threshold_on_or_off():
    def line(config):
        return next(c for c in default_charts("grpo", ["actor/kl_loss"], config) if c["id"] == "kl")["threshold"]

    assert line({"guard_rules": [{"rule": "kl", "threshold": 0.3}]}) == {"value": 0.3, "label": "KL guard 0.3"}
    off = {"guard_rules": [{"rule": "kl", "enabled": False, "threshold": 2.0}]}
    assert line(off) == {"value": 2.0, "label": "KL threshold 2 (guard off)"}
    custom = {"guard_rules": [{"name": "tight", "metric": "actor/kl_loss", "condition": "above", "threshold": 0.05}]}
    assert line(custom) == {"value": 0.05, "label": "rule tight: 0.05"}
    assert line({})["label"] == "KL threshold 0.1 (guard off)"
