"""The rollout store's pure parts: component series, GRPO advantages, normalising rows, retention."""
from __future__ import annotations

import pytest

from training import rollouts
from training.rundir import RunDir


def test_component_series_count_failures_apart_from_the_mean():
    rows = [{"components": {"a": 1.0, "b": None}, "errors": {"b": "ValueError: x"}, "extras": {"a": {"fmt": 1}}},
            {"components": {"a": 0.0, "b": 2.0}, "errors": {}, "extras": {"a": {"fmt": 0, "note": "text"}}}]
    m = rollouts.component_metrics(rows)
    assert m == {"reward/a/mean": 0.5, "reward/a/error_share": 0.0, "reward/b/mean": 2.0,
                 "reward/b/error_share": 0.5, "reward/a/fmt/mean": 0.5}


def test_grpo_advantages_are_group_normalised_and_a_lone_sample_keeps_its_score():
    adv = rollouts.grpo_advantages([1.0, 0.0, 1.0, 0.0, 3.0], ["g", "g", "h", "h", "solo"])
    assert adv[:4] == pytest.approx([0.7071, -0.7071, 0.7071, -0.7071], abs=1e-4)
    assert adv[4] == pytest.approx(3.0 / (1 + 1e-6))


def test_rows_the_local_trainer_wrote_are_left_as_they_are():
    row = {"input": "p", "output": "o", "score": 1.0, "step": 2, "uid": "2:0", "sample_index": 3,
           "components": {"a": 1.0}, "errors": {}, "extras": {}, "advantage": 0.25, "response_length": 4,
           "truncated": False}
    assert rollouts.normalize([row]) == [row]


def test_retention_keeps_the_last_steps_every_kth_older_one_and_the_size_cap():
    sizes = dict.fromkeys(range(1, 13), 100)
    assert rollouts.plan_retention(sizes, 3, 5, None) == [1, 2, 3, 4, 6, 7, 8, 9]
    assert rollouts.plan_retention(sizes, None, None, None) == []
    assert rollouts.plan_retention(sizes, 3, None, None) == list(range(1, 10))
    # 4 kept (5, 10, 11, 12) weigh 400 bytes; a cap of 250 bytes drops the oldest two
    assert rollouts.plan_retention(sizes, 3, 5, 250 / 1024 / 1024) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    # the newest dump stays even alone over the cap
    assert rollouts.plan_retention({1: 10_000, 2: 10_000}, None, None, 1e-6) == [1]


def test_prune_deletes_only_the_dumps_retention_lets_go(tmp_path):
    run = RunDir(tmp_path)
    for step in range(1, 8):
        rollouts.write_step(tmp_path, step, [{"input": "p", "output": "o", "score": 0.0, "step": step}])
    (run.samples_dir("rollout") / "notes.jsonl").write_text("{}\n")  # not a step: never touched
    assert rollouts.prune(tmp_path, 2, 3, None) == [1, 2, 4, 5]
    assert rollouts.steps(tmp_path) == [3, 6, 7]
    assert (run.samples_dir("rollout") / "notes.jsonl").exists()
