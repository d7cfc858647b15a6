"""Guard defaults in the presets: the KL guard is the health rule "kl"; GPU presets restore on KL > 0.1, demo-cpu
keeps it off (its line at 2); the guarded demo declares rules that parse."""
from __future__ import annotations

import pytest

from training.guard_rules import kl_rule, parse_rules
from training.hparams import PRESETS, resolve_config


@pytest.mark.parametrize("preset", [n for n, p in PRESETS.items() if p["backend"] == "verl"])
def test_gpu_presets_restore_the_last_checkpoint_when_kl_passes_0_1(preset):
    cfg, errors, _ = resolve_config("grpo", preset, {}, backend="verl")
    assert not errors
    guard = kl_rule(cfg["guard_rules"])
    assert (guard.name, guard.enabled, guard.threshold, guard.patience, guard.action) == ("kl", True, 0.1, 3,
                                                                                          "restore")
    assert guard.lr_factor == 0.5 and guard.max_restores == 2


def test_plain_demo_keeps_the_kl_guard_off_and_the_guarded_demo_declares_a_restoring_kl_rule():
    plain, errors, _ = resolve_config("grpo", "demo-cpu", {})
    guard = kl_rule(plain["guard_rules"])
    assert not errors and (guard.enabled, guard.threshold) == (False, 2.0)
    assert [r.name for r in parse_rules(plain["guard_rules"])] == ["kl"]
    cfg, errors, _ = resolve_config("grpo", "demo-cpu-guarded", {})
    assert not errors
    rules = {r.name: r for r in parse_rules(cfg["guard_rules"])}
    assert rules["kl"].action == "restore" and rules["kl"].threshold == 0.3
    assert cfg["hp"]["save_freq"] > 0  # restore needs checkpoints
    assert {"entropy_collapse", "zero_variance_groups", "grad_norm_spike", "reward_hacking"} <= set(rules)


def test_rules_given_with_a_job_replace_the_presets_and_bad_ones_are_refused():
    cfg, errors, _ = resolve_config("grpo", "demo-cpu-guarded", {"guard_rules": [{"rule": "kl", "action": "warn"}],
                                                                 "lr": 0.002})
    assert not errors and cfg["guard_rules"] == [{"rule": "kl", "action": "warn"}] and cfg["hp"]["lr"] == 0.002
    _, errors, _ = resolve_config("grpo", "demo-cpu", {"guard_rules": [{"rule": "kl", "condition": "sideways"}]})
    assert "condition must be one of" in errors["guard_rules"]
    # a stored job config keeps its rules (restore, rollback, branch start from it)
    again, errors, _ = resolve_config("grpo", "demo-cpu", {"lr": 0.001}, base=cfg)
    assert not errors and again["guard_rules"] == cfg["guard_rules"]


def test_a_stall_block_is_kept_with_the_job_and_a_bad_one_refused():
    cfg, errors, _ = resolve_config("grpo", "demo-cpu", {"stall": {"after_s": 600, "action": "cancel_resume"}})
    assert not errors and cfg["stall"] == {"after_s": 600, "action": "cancel_resume"}
    again, errors, _ = resolve_config("grpo", "demo-cpu", {"lr": 0.001}, base=cfg)
    assert not errors and again["stall"] == cfg["stall"]
    _, errors, _ = resolve_config("grpo", "demo-cpu", {"stall": {"action": "reboot"}})
    assert "stall.action must be one of" in errors["stall"]
