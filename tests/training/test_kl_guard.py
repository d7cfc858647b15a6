"""The KL guard's state machine: every transition, and the state round-trip the web app persists."""
from __future__ import annotations

import pytest

from training.kl_guard import (
    RESTORE,
    RESTORING,
    STOP,
    STOPPED,
    WATCHING,
    GuardConfig,
    GuardConfigError,
    GuardState,
    KLGuard,
    next_hp,
    restore_target,
)

HP = {"lr": 1e-3, "kl_coef": 0.02}


def guard(**kw) -> KLGuard:
    return KLGuard(GuardConfig(**kw))


def test_below_threshold_never_trips():
    g = guard(threshold=0.1, patience=2)
    assert g.feed([(s, 0.05) for s in range(1, 50)], {10: 0.05}, HP) == []
    assert g.state.phase == WATCHING and g.state.last_step == 49 and g.state.streak == []


def test_a_dip_resets_the_streak():
    g = guard(threshold=0.1, patience=3)
    # two over, one under, two over: never three in a row
    assert g.feed([(1, 0.2), (2, 0.3), (3, 0.05), (4, 0.2), (5, 0.2)], {}, HP) == []
    assert [s for s, _ in g.state.streak] == [4, 5]


def test_equal_to_threshold_is_within():
    g = guard(threshold=0.1, patience=1, action="stop")
    assert g.feed([(1, 0.1)], {}, HP) == []
    assert len(g.feed([(2, 0.1000001)], {}, HP)) == 1


def test_missing_values_neither_extend_nor_break_a_streak():
    g = guard(threshold=0.1, patience=3, action="stop")
    assert g.feed([(1, 0.5), (2, None), (3, float("nan")), (4, 0.5)], {}, HP) == []
    [d] = g.feed([(5, 0.5)], {}, HP)
    assert d.action == STOP and [s for s, _ in d.values] == [1, 4, 5]


def test_duplicates_and_out_of_order_points_are_ignored():
    g = guard(threshold=0.1, patience=2, action="stop")
    assert g.feed([(3, 0.5), (3, 0.5), (2, 0.9)], {}, HP) == []
    assert g.state.streak == [[3, 0.5]]


def test_stop_action_trips_after_patience_and_then_stays_quiet():
    g = guard(threshold=0.1, patience=3, action="stop")
    decisions = g.feed([(1, 0.05), (2, 0.2), (3, 0.4), (4, 0.3), (5, 0.9)], {0: 0.0}, HP)
    assert len(decisions) == 1
    d = decisions[0]
    assert d.action == STOP and d.step == 4 and d.values == [[2, 0.2], [3, 0.4], [4, 0.3]]
    assert "0.1" in d.reason and "2–4" in d.reason
    assert g.state.phase == STOPPED
    assert g.feed([(6, 5.0), (7, 5.0), (8, 5.0)], {}, HP) == []


def test_restore_picks_the_newest_good_checkpoint_before_the_streak():
    g = guard(threshold=0.1, patience=2, lr_factor=0.5)
    ckpt_kl = {5: 0.02, 10: 0.5, 15: 0.03, 20: 0.04}  # 10 was a spike; 20 is inside the streak
    pts = [(s, 0.05) for s in range(1, 18)] + [(18, 0.3), (19, 0.2), (20, 0.25)]
    [d] = g.feed(pts, ckpt_kl, HP)
    assert d.action == RESTORE and d.step == 19 and d.to_step == 15
    assert d.hp == {"lr": pytest.approx(5e-4)}
    assert g.state.phase == RESTORING and g.state.rollbacks == 1 and g.state.restore_ceiling == 19


def test_restore_skips_checkpoints_with_unknown_or_high_kl():
    assert restore_target({5: 0.01, 10: None, 12: 0.4}, 0.1, before=20) == 5
    assert restore_target({5: 0.2}, 0.1, before=20) is None
    assert restore_target({25: 0.0}, 0.1, before=20) is None


def test_restore_with_no_good_checkpoint_stops():
    g = guard(threshold=0.1, patience=1)
    [d] = g.feed([(3, 0.5)], {5: 0.0}, HP)  # the only checkpoint is after the streak
    assert d.action == STOP and "no checkpoint" in d.reason
    assert g.state.phase == STOPPED


def test_late_points_of_the_old_attempt_are_ignored_then_the_new_attempt_is_watched():
    g = guard(threshold=0.1, patience=2, lr_factor=0.5, max_rollbacks=3)
    [d] = g.feed([(9, 0.01), (10, 0.01), (11, 0.5), (12, 0.5)], {10: 0.01}, HP)
    assert d.to_step == 10
    # the old process logs 13 and 14 before it dies: ignored
    assert g.feed([(13, 0.9), (14, 0.9)], {10: 0.01}, HP) == []
    assert g.state.phase == RESTORING
    # the new attempt starts again at 11 with a healthy KL
    assert g.feed([(11, 0.02), (12, 0.03), (13, 0.04)], {10: 0.01}, HP) == []
    assert g.state.phase == WATCHING and g.state.last_step == 13


def test_second_restore_compounds_the_factor_and_max_rollbacks_then_stops():
    g = guard(threshold=0.1, patience=1, lr_factor=0.5, max_rollbacks=2)
    ck = {10: 0.01}
    [d1] = g.feed([(10, 0.01), (11, 0.5)], ck, HP)
    [d2] = g.feed([(11, 0.6)], ck, HP)  # new attempt, KL high again
    assert (d1.action, d2.action) == (RESTORE, RESTORE)
    assert d1.hp["lr"] == pytest.approx(5e-4) and d2.hp["lr"] == pytest.approx(2.5e-4)
    [d3] = g.feed([(11, 0.7)], ck, HP)
    assert d3.action == STOP and "max 2" in d3.reason
    assert g.state.rollbacks == 2 and g.state.phase == STOPPED


def test_kl_coef_factor_grows_the_coefficient():
    g = guard(threshold=0.1, patience=1, lr_factor=None, kl_coef_factor=2.0)
    [d] = g.feed([(4, 0.05), (5, 0.3)], {4: 0.05}, HP)
    assert d.hp == {"kl_coef": pytest.approx(0.04)} and d.to_step == 4


def test_disabled_guard_does_nothing():
    g = guard(threshold=0.1, patience=1, enabled=False)
    assert g.feed([(1, 9.0), (2, 9.0)], {0: 0.0}, HP) == []


def test_state_round_trips_through_json_dict():
    g = guard(threshold=0.1, patience=3, action="stop")
    g.feed([(1, 0.5), (2, 0.5)], {}, HP)
    g2 = KLGuard(g.cfg, GuardState.from_dict(g.state.to_dict()))
    [d] = g2.feed([(3, 0.5)], {}, HP)
    assert d.action == STOP and d.values[0] == [1, 0.5]


@pytest.mark.parametrize("raw, message", [
    ({"threshold": 0}, "threshold"),
    ({"patience": 0}, "patience"),
    ({"patience": 1.5}, "whole number"),
    ({"action": "explode"}, "action"),
    ({"lr_factor": 2.0}, "lr_factor"),
    ({"lr_factor": None, "kl_coef_factor": 0.5}, "kl_coef_factor"),
    ({"lr_factor": None}, "needs lr_factor or kl_coef_factor"),
    ({"max_rollbacks": -1}, "max_rollbacks"),
    ({"treshold": 0.2}, "unknown keys"),
    ({"threshold": "high"}, "numbers"),
])
def test_bad_config_is_a_clear_error(raw, message):
    with pytest.raises(GuardConfigError, match=message):
        GuardConfig.from_dict(raw)


def test_config_defaults_and_alternative_factors():
    cfg = GuardConfig.from_dict(None)
    assert (cfg.threshold, cfg.patience, cfg.action, cfg.lr_factor) == (0.1, 3, "restore", 0.5)
    cfg = GuardConfig.from_dict({"kl_coef_factor": 2})
    assert cfg.lr_factor is None and cfg.kl_coef_factor == 2.0


def test_next_hp_needs_the_hyperparameter_it_scales():
    with pytest.raises(GuardConfigError, match="hp.lr"):
        next_hp(GuardConfig(lr_factor=0.5), {"kl_coef": 0.1}, {})


def test_launch_form_block_is_accepted():
    # the runs app's default block: kl_factor is the alias, metric names the series, both factors apply
    cfg = GuardConfig.from_dict({"enabled": True, "metric": "actor/kl_loss", "threshold": 0.1, "patience": 3,
                                 "action": "restore", "lr_factor": 0.5, "kl_factor": 2.0, "max_rollbacks": 2})
    assert cfg.kl_coef_factor == 2.0 and cfg.metric == "actor/kl_loss"
    assert next_hp(cfg, HP, {}) == {"lr": pytest.approx(5e-4), "kl_coef": pytest.approx(0.04)}
