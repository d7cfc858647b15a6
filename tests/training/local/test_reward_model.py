"""Bradley-Terry reward model: the loss, a run that beats chance, and use as a reward component."""
from __future__ import annotations

import math

import pytest
import torch

from training import checkpoints
from training.local.reward_model import bradley_terry
from training.local.train import run_job
from training.reward_client import RewardRequest, RewardScorer


def test_bradley_terry_matches_hand_computed_values():
    loss, acc = bradley_terry(torch.tensor([2.0, 0.0]), torch.tensor([1.0, 1.0]))
    expected = (math.log1p(math.exp(-1.0)) + math.log1p(math.exp(1.0))) / 2
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    assert acc.item() == 0.5


def test_reward_model_beats_chance_and_serves_as_a_reward_component(make_run, read_metrics, tmp_path):
    run = make_run("reward_model", max_steps=150, test_freq=150, save_freq=150)
    run_job(run, run / "metrics.jsonl")
    m = read_metrics(run / "metrics.jsonl")
    assert m[150]["rm/val_accuracy"] > 0.7 > m[0]["rm/val_accuracy"] - 0.1
    exported = checkpoints.export_hf(run / "checkpoints" / "global_step_150", tmp_path / "rm", merge_lora=True)
    reward = {"shaping": "raw", "components": [{"type": "model", "path": str(exported), "weight": 1.0}]}
    with RewardScorer(reward, run) as scorer:
        good, bad = scorer.score([RewardRequest("2+3=", "5"), RewardRequest("2+3=", "8")])
    assert good.score > bad.score
