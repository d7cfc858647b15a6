"""One guard engine: the KL guard becomes the built-in health rule "kl".

Forward, for every job that has a `config["kl_guard"]` block: the block becomes a "kl" entry of
`config["guard_rules"]` (kl_factor -> kl_coef_factor, max_rollbacks -> max_restores; off stays off, so the
chart keeps its line); when the job already had an enabled "kl" rule as well, the old guard is kept as a
custom rule "kl_guard" so both still act. The guard's state (KLGuardRecord) moves into the job's
GuardRulesRecord under that rule's name (streak, restores, trips; a stopped or restoring guard keeps the
engine stopped or restoring), its "kl_guard" run events become "guard_rule" events of that rule, and
attempts started by it say "guard_rule". Then KLGuardRecord goes.
"""
from __future__ import annotations

from django.db import migrations

KL_METRIC = "actor/kl_loss"
RENAMED = (("threshold", "threshold"), ("patience", "patience"), ("lr_factor", "lr_factor"),
           ("kl_coef_factor", "kl_coef_factor"), ("kl_factor", "kl_coef_factor"), ("max_rollbacks", "max_restores"))


def rule_entry(guard: dict, name: str) -> dict:
    """The KL guard block as a health rule (the built-in "kl", or a custom rule on the same metric)."""
    entry = {"rule": "kl"} if name == "kl" else {"name": name, "metric": KL_METRIC, "condition": "above"}
    entry["action"] = guard.get("action") or "restore"  # the KL guard's own default
    for old, new in RENAMED:
        if guard.get(old) is not None:
            entry[new] = guard[old]
    if name != "kl":
        entry.setdefault("threshold", 0.1)
        entry.setdefault("patience", 3)
    if guard.get("enabled") is False:
        entry["enabled"] = False
    return entry


def convert_config(config: dict) -> tuple[dict, str | None]:
    """(the new config, the name of the rule the guard became, or None when it was dropped)."""
    guard = config.get("kl_guard")
    config = {k: v for k, v in config.items() if k != "kl_guard"}
    if not isinstance(guard, dict):
        return config, None
    rules = [r for r in config.get("guard_rules") or [] if isinstance(r, dict)]
    kl_entry = next((r for r in rules if r.get("rule") == "kl" and not r.get("name")), None)
    if kl_entry is None:
        return {**config, "guard_rules": [rule_entry(guard, "kl"), *rules]}, "kl"
    if guard.get("enabled") is False:
        return {**config, "guard_rules": rules}, None
    if kl_entry.get("enabled") is False:  # the guard was the one acting: it takes the rule's place
        return {**config, "guard_rules": [rule_entry(guard, "kl") if r is kl_entry else r for r in rules]}, "kl"
    return {**config, "guard_rules": [*rules, rule_entry(guard, "kl_guard")]}, "kl_guard"


def merge_state(engine: dict, old: dict, old_trips: int, name: str) -> dict:
    """The old guard's state as the rule `name` inside the rule engine's state."""
    engine = dict(engine or {})
    streak = old.get("streak") or []
    phase = old.get("phase") or "watching"
    rules = dict(engine.get("rules") or {})
    rules[name] = {"status": "tripped" if phase in ("stopped", "restoring") else ("ok" if old.get("last_step")
                                                                                is not None else "warming_up"),
                   "streak": streak, "baseline": [], "history": [], "versus": [], "trips": old_trips,
                   "restores": int(old.get("rollbacks") or 0), "last": streak[-1] if streak else None}
    engine["rules"] = rules
    if phase == "stopped" or engine.get("phase") == "stopped":
        engine["phase"] = "stopped"
    elif phase == "restoring":
        engine["phase"], engine["restore_ceiling"] = "restoring", old.get("restore_ceiling")
    engine.setdefault("phase", "watching")
    steps = [s for s in (engine.get("last_step"), old.get("last_step")) if s is not None]
    engine["last_step"] = max(steps) if steps else None
    engine["hp"] = {**(old.get("hp") or {}), **(engine.get("hp") or {})}
    engine.setdefault("bad_steps", [])
    return engine


def forward(apps, schema_editor):
    Job = apps.get_model("runs", "Job")
    JobAttempt = apps.get_model("runs", "JobAttempt")
    RunEvent = apps.get_model("runs", "RunEvent")
    KLGuardRecord = apps.get_model("monitoring", "KLGuardRecord")
    GuardRulesRecord = apps.get_model("monitoring", "GuardRulesRecord")
    records = {r.job_id: r for r in KLGuardRecord.objects.all()}
    names: dict[int, str] = {}
    for job in Job.objects.all().iterator():
        if not isinstance(job.config, dict) or "kl_guard" not in job.config:
            continue
        job.config, name = convert_config(job.config)
        job.save(update_fields=["config"])
        old = records.get(job.pk)
        if name is not None:
            names[job.pk] = name
        if name is not None and old is not None:
            rec, _ = GuardRulesRecord.objects.get_or_create(job_id=job.pk)
            rec.state = merge_state(rec.state, old.state or {}, old.trips, name)
            rec.trips += old.trips
            rec.save(update_fields=["state", "trips"])
    for event in RunEvent.objects.filter(kind="kl_guard").iterator():
        event.kind = "guard_rule"
        event.data = {"rule": names.get(event.job_id, "kl"), "metric": KL_METRIC, **(event.data or {})}
        event.save(update_fields=["kind", "data"])
    JobAttempt.objects.filter(reason="kl_guard").update(reason="guard_rule")


class Migration(migrations.Migration):

    dependencies = [
        ("monitoring", "0012_blind_tasks_only"),
        ("runs", "0008_rescoresample_log"),
    ]

    operations = [
        migrations.RunPython(forward, migrations.RunPython.noop),
        migrations.DeleteModel(name="KLGuardRecord"),
    ]
