"""The run-health rules engine (training.guard_rules): hand-made series, decisions checked step by step."""
import pytest

from training.guard_rules import (
    BRANCH,
    BUILTIN,
    METRIC_SOURCES,
    OK,
    RESTORE,
    STOP,
    TRIPPED,
    WARMING_UP,
    WARN,
    EngineState,
    Rule,
    RuleConfigError,
    RuleEngine,
    describe,
    parse_rules,
)


def pts(metric, values, start=1):
    return [(start + i, metric, v) for i, v in enumerate(values)]


def engine(*raw, state=None):
    return RuleEngine(parse_rules(list(raw)), state)


def test_above_with_patience_warns_once_per_streak_and_rearms():
    e = engine({"name": "kl", "metric": "actor/kl_loss", "condition": "above", "threshold": 0.1, "patience": 2})
    ds = e.feed(pts("actor/kl_loss", [0.05, 0.2, 0.05, 0.2, 0.3, 0.4]))
    assert [(d.step, d.action) for d in ds] == [(5, WARN)]  # a broken streak does not count
    assert ds[0].values == [[4, 0.2], [5, 0.3]]
    assert e.statuses()[0]["status"] == TRIPPED
    e.feed(pts("actor/kl_loss", [0.01], start=7))
    assert e.statuses()[0]["status"] == OK


def test_drop_uses_the_warm_up_baseline_and_reports_warming_up():
    e = engine({"rule": "entropy_collapse", "warmup": 3, "patience": 2, "threshold": 0.5})
    e.feed(pts("actor/entropy", [2.0, 2.2, 1.8]))
    assert e.statuses()[0]["status"] == WARMING_UP
    assert e.feed(pts("actor/entropy", [1.1, 0.9], start=4)) == []  # 0.9 < 2.0 * 0.5 is false at 4, true at 5
    ds = e.feed(pts("actor/entropy", [0.5], start=6))
    assert [(d.rule, d.step, d.action) for d in ds] == [("entropy_collapse", 6, WARN)]
    assert "baseline 2" in ds[0].reason


def test_spike_needs_a_full_window_and_catches_a_jump():
    e = engine({"rule": "grad_norm_spike", "window": 4, "threshold": 3})
    assert e.feed(pts("actor/grad_norm", [1.0, 1.1, 0.9, 1.0])) == []
    assert e.feed(pts("actor/grad_norm", [1.05], start=5)) == []
    ds = e.feed(pts("actor/grad_norm", [5.0], start=6))
    assert [d.step for d in ds] == [6]


def test_diverge_reward_up_while_validation_win_rate_down():
    e = engine({"rule": "reward_hacking", "window": 3, "threshold": 0.05})
    points = pts("critic/score/mean", [0.1 * i for i in range(1, 13)])
    points += [(4, "val-core/a/win_rate", 0.6), (4, "val-core/b/win_rate", 0.6), (8, "val-core/a/win_rate", 0.58),
               (8, "val-core/b/win_rate", 0.56), (12, "val-core/a/win_rate", 0.5), (12, "val-core/b/win_rate", 0.5)]
    ds = e.feed(points)
    assert [(d.step, d.action) for d in ds] == [(12, WARN)]
    # the same win rates with a falling reward are not hacking
    e2 = engine({"rule": "reward_hacking", "window": 3, "threshold": 0.05})
    flat = pts("critic/score/mean", [1.2 - 0.1 * i for i in range(12)]) + [p for p in points if "win_rate" in p[1]]
    assert e2.feed(flat) == []


def test_restore_goes_to_the_newest_checkpoint_where_every_rule_held():
    e = engine({"name": "kl", "metric": "kl", "condition": "above", "threshold": 0.1, "patience": 2,
                "action": "restore", "lr_factor": 0.5, "max_restores": 1},
               {"name": "len", "metric": "len", "condition": "below", "threshold": 3})
    points = pts("kl", [0.0, 0.0, 0.0, 0.0, 0.0, 0.2, 0.3]) + pts("len", [5, 5, 5, 1, 5, 5, 5])
    ds = e.feed(points, checkpoint_steps=[2, 4, 5], base_hp={"lr": 1e-3})
    restore = [d for d in ds if d.action == RESTORE]
    assert len(restore) == 1
    # step 5 is fine, but at step 4 the length rule was violated: the newest good checkpoint before 6 is 5
    assert restore[0].to_step == 5 and restore[0].hp == {"lr": 5e-4}
    # late points of the old attempt are ignored; the new attempt re-judges from step 6
    assert e.feed(pts("kl", [0.9, 0.9], start=8), [2, 4, 5], {"lr": 1e-3}) == []
    ds = e.feed(pts("kl", [0.2, 0.2], start=6), [2, 4, 5], {"lr": 1e-3})
    assert [d.action for d in ds] == [STOP]  # max_restores reached
    assert "already restored 1" in ds[0].reason
    assert e.feed(pts("kl", [0.9, 0.9], start=8)) == []  # stopped: nothing more


def test_restore_skips_a_checkpoint_whose_step_violated_a_rule():
    e = engine({"name": "kl", "metric": "kl", "condition": "above", "threshold": 0.1, "patience": 2,
                "action": "restore"},
               {"name": "len", "metric": "len", "condition": "below", "threshold": 3})
    points = pts("kl", [0.0, 0.0, 0.0, 0.0, 0.2, 0.3]) + pts("len", [5, 5, 5, 1, 5, 5])
    ds = e.feed(points, checkpoint_steps=[2, 4], base_hp={"lr": 1e-3})
    assert [d.to_step for d in ds if d.action == RESTORE] == [2]


def test_restore_without_a_good_checkpoint_stops():
    e = engine({"rule": "kl", "patience": 1})
    ds = e.feed(pts("actor/kl_loss", [0.5]), checkpoint_steps=[], base_hp={"lr": 1e-3})
    assert [d.action for d in ds] == [STOP] and "no checkpoint" in ds[0].reason


def test_branch_keeps_watching_and_falls_back_to_warn():
    e = engine({"rule": "kl", "patience": 1, "action": "branch", "max_restores": 1, "kl_coef_factor": 2.0,
                "lr_factor": None})
    ds = e.feed(pts("actor/kl_loss", [0.0, 0.0, 0.5, 0.6]), [1, 2], {"lr": 1e-3, "kl_coef": 0.02})
    assert [(d.action, d.to_step) for d in ds] == [(BRANCH, 2), (WARN, None)]
    assert ds[0].hp == {"kl_coef": 0.04}
    assert e.state.phase == "watching"


def test_state_round_trips_through_json():
    import json

    rules = parse_rules([{"rule": "kl", "patience": 2}])
    e = RuleEngine(rules)
    e.feed(pts("actor/kl_loss", [0.5]))
    e2 = RuleEngine(rules, EngineState.from_dict(json.loads(json.dumps(e.state.to_dict()))))
    assert [d.step for d in e2.feed(pts("actor/kl_loss", [0.5], start=2))] == [2]


@pytest.mark.parametrize("raw, message", [
    ({"rule": "nope"}, "unknown built-in"),
    ({"metric": "x", "condition": "above", "threshold": 1}, "needs a name"),
    ({"name": "a", "metric": "x", "condition": "sideways", "threshold": 1}, "condition must be"),
    ({"name": "a", "metric": "x", "condition": "drop", "threshold": 2}, "fraction"),
    ({"name": "a", "metric": "x", "condition": "above", "threshold": 1, "action": "explode"}, "action must be"),
    ({"name": "a", "metric": "x", "condition": "diverge", "threshold": 1}, "versus"),
    ({"name": "a", "metric": "x", "condition": "above", "threshold": "high"}, "numbers"),
    ({"name": "a", "metric": "x", "condition": "above", "threshold": 1, "colour": 1}, "unknown keys"),
    ({"rule": "kl", "lr_factor": 2}, "lr_factor"),
])
def test_bad_rules_are_refused_with_the_field_named(raw, message):
    with pytest.raises(RuleConfigError, match=message):
        Rule.from_dict(raw)


def test_duplicate_names_refused_and_every_builtin_parses_with_its_sources():
    with pytest.raises(RuleConfigError, match="unique"):
        parse_rules([{"rule": "kl"}, {"rule": "kl"}])
    assert set(METRIC_SOURCES) == set(BUILTIN)
    assert len(parse_rules([{"rule": name} for name in BUILTIN])) == len(BUILTIN)


def test_the_docs_list_every_builtin_rule_with_its_metric():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "run-health.md").read_text()
    for name, rule in BUILTIN.items():
        assert f"| `{name}` |" in doc and rule["metric"] in doc, name


def test_a_kl_spike_restores_the_last_good_checkpoint_with_a_new_seed():
    e = engine({"rule": "kl_spike", "window": 5, "action": "restore", "new_seed": True, "lr_factor": None,
                "max_restores": 2})
    calm = [0.010, 0.012, 0.011, 0.009, 0.010, 0.011, 0.012]
    ds = e.feed(pts("actor/kl_loss", calm + [0.2]), checkpoint_steps=[3, 6], base_hp={"lr": 1e-3, "seed": 7})
    assert [(d.action, d.to_step, d.hp) for d in ds] == [(RESTORE, 6, {"seed": 8})]
    assert describe(parse_rules([{"rule": "kl_spike", "action": "restore", "new_seed": True}])[0]).endswith(
        "restore (new seed, at most 2×)")
    # a second restore draws yet another seed
    ds = e.feed(pts("actor/kl_loss", calm, start=7) + pts("actor/kl_loss", [0.3], start=14), [3, 6, 12],
                {"lr": 1e-3, "seed": 7})
    assert [(d.action, d.to_step, d.hp) for d in ds] == [(RESTORE, 12, {"seed": 9})]


def test_the_garbled_output_and_ratio_spike_rules_read_their_metrics():
    e = engine({"rule": "garbled_output"}, {"rule": "ratio_spike", "window": 3})
    ds = e.feed(pts("garbled/share", [0.0, 0.1, 0.5, 0.6]) + pts("actor/ppo_kl", [0.001, 0.0012, 0.0011, 0.05]))
    assert {(d.rule, d.step, d.action) for d in ds} == {("garbled_output", 4, WARN), ("ratio_spike", 4, WARN)}
