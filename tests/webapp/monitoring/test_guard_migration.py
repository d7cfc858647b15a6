"""The data migration that made the KL guard a health rule (monitoring 0013_one_guard), run forward on rows
written the old way: configs, the guard's state, its events and the attempts it started."""
from __future__ import annotations

import pytest

from tests.migration_support import migrate_app_to
from training.guard_rules import EngineState, RuleEngine, parse_rules

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = ("monitoring", "0012_blind_tasks_only")
AFTER = ("monitoring", "0013_one_guard")
OLD_GUARD = {"enabled": True, "metric": "actor/kl_loss", "threshold": 0.2, "patience": 2, "action": "restore",
             "lr_factor": 0.5, "kl_factor": 2.0, "max_rollbacks": 1}


def test_old_kl_guards_become_the_kl_rule_with_their_history():
    apps = migrate_app_to(BEFORE)
    try:
        Project, Job = apps.get_model("core", "Project"), apps.get_model("runs", "Job")
        RunEvent, JobAttempt = apps.get_model("runs", "RunEvent"), apps.get_model("runs", "JobAttempt")
        KLGuardRecord = apps.get_model("monitoring", "KLGuardRecord")
        GuardRulesRecord = apps.get_model("monitoring", "GuardRulesRecord")
        project = Project.objects.create(slug="old", name="Old")
        hp = {"lr": 5e-4, "kl_coef": 0.04, "save_freq": 5}

        def job(name, config):
            return Job.objects.create(project=project, name=name, kind="grpo", config={"hp": hp, **config})

        restored = job("restored", {"kl_guard": OLD_GUARD})
        KLGuardRecord.objects.create(job=restored, trips=1, state={
            "phase": "stopped", "last_step": 40, "streak": [], "rollbacks": 1, "restore_ceiling": None,
            "hp": {"lr": 5e-4, "kl_coef": 0.04}})
        RunEvent.objects.create(job=restored, kind="kl_guard", step=12, message="KL above 0.2",
                                data={"action": "restore", "to_step": 10})
        JobAttempt.objects.create(job=restored, number=2, reason="kl_guard", state="succeeded")
        demo = job("demo", {"kl_guard": {**OLD_GUARD, "enabled": False, "threshold": 2.0},
                            "guard_rules": [{"rule": "entropy_collapse"}]})
        both = job("both", {"kl_guard": OLD_GUARD, "guard_rules": [{"rule": "kl", "threshold": 0.3}]})
        GuardRulesRecord.objects.create(job=both, trips=1, state={"phase": "watching", "last_step": 30, "rules": {
            "kl": {"status": "ok", "trips": 1}}})
        KLGuardRecord.objects.create(job=both, trips=2, state={"phase": "watching", "last_step": 32,
                                                               "streak": [[32, 0.25]], "rollbacks": 0, "hp": {}})
        untouched = job("reward model", {})

        apps = migrate_app_to(AFTER)
        Job, RunEvent = apps.get_model("runs", "Job"), apps.get_model("runs", "RunEvent")
        JobAttempt = apps.get_model("runs", "JobAttempt")
        GuardRulesRecord = apps.get_model("monitoring", "GuardRulesRecord")
        with pytest.raises(LookupError):
            apps.get_model("monitoring", "KLGuardRecord")

        config = Job.objects.get(pk=restored.pk).config
        assert "kl_guard" not in config and config["hp"] == hp
        (kl,) = parse_rules(config["guard_rules"])
        assert (kl.name, kl.enabled, kl.threshold, kl.patience, kl.action) == ("kl", True, 0.2, 2, "restore")
        assert (kl.lr_factor, kl.kl_coef_factor, kl.max_restores) == (0.5, 2.0, 1)
        record = GuardRulesRecord.objects.get(job_id=restored.pk)
        state = EngineState.from_dict(record.state)
        assert record.trips == 1 and state.phase == "stopped" and state.last_step == 40
        assert state.rule("kl").restores == 1 and state.hp == {"lr": 5e-4, "kl_coef": 0.04}
        assert RuleEngine([kl], state).feed([(41, "actor/kl_loss", 9.0)] * 3) == []  # a stopped guard stays idle
        event = RunEvent.objects.get(job_id=restored.pk)
        assert event.kind == "guard_rule" and event.data == {"rule": "kl", "metric": "actor/kl_loss",
                                                             "action": "restore", "to_step": 10}
        assert JobAttempt.objects.get(job_id=restored.pk).reason == "guard_rule"

        config = Job.objects.get(pk=demo.pk).config
        rules = parse_rules(config["guard_rules"])
        assert [(r.name, r.enabled) for r in rules] == [("kl", False), ("entropy_collapse", True)]
        assert rules[0].threshold == 2.0  # the chart keeps the line where it was

        config = Job.objects.get(pk=both.pk).config
        rules = {r.name: r for r in parse_rules(config["guard_rules"])}
        assert rules["kl"].threshold == 0.3 and rules["kl_guard"].threshold == 0.2  # both still act
        assert rules["kl_guard"].metric == "actor/kl_loss" and rules["kl_guard"].condition == "above"
        record = GuardRulesRecord.objects.get(job_id=both.pk)
        state = EngineState.from_dict(record.state)
        assert record.trips == 3 and state.last_step == 32
        assert state.rule("kl").trips == 1 and state.rule("kl_guard").streak == [[32, 0.25]]

        assert Job.objects.get(pk=untouched.pk).config == {"hp": hp}
    finally:
        migrate_app_to(None)
