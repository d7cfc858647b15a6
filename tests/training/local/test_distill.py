"""Distillation: loss terms on hand-computed values, and runs that move the student to the teacher."""
from __future__ import annotations

import math

import pytest
import torch

from training.local.distill import distill_loss, kd_terms, reverse_kl
from training.local.train import run_job


def test_kd_terms_match_hand_computed_values():
    student = torch.log(torch.tensor([[[0.4, 0.6]]]))
    teacher = torch.log(torch.tensor([[[0.9, 0.1]]]))
    parts = kd_terms(student, teacher, targets=torch.tensor([[0]]), mask=torch.ones(1, 1), temperature=1.0)
    kl = 0.9 * math.log(0.9 / 0.4) + 0.1 * math.log(0.1 / 0.6)
    assert parts["ce"].item() == pytest.approx(-math.log(0.4), abs=1e-6)
    assert parts["kd"].item() == pytest.approx(kl, abs=1e-6)
    assert parts["top1"].item() == 0.0  # student prefers token 1, teacher token 0
    assert distill_loss(parts, 0.3).item() == pytest.approx(-0.3 * math.log(0.4) + 0.7 * kl, abs=1e-6)


def test_temperature_scales_kd_by_t_squared_and_masks_positions():
    s = torch.tensor([[[1.0, 0.0, -1.0], [5.0, 0.0, 0.0]]])
    t = torch.tensor([[[0.0, 1.0, 0.0], [-5.0, 0.0, 9.0]]])
    mask = torch.tensor([[1.0, 0.0]])  # the second position must not count
    parts = kd_terms(s, t, torch.tensor([[1, 2]]), mask, temperature=2.0)
    ts, ss = torch.softmax(t[0, 0] / 2, -1), torch.softmax(s[0, 0] / 2, -1)
    expected = 4 * (ts * (ts.log() - ss.log())).sum()
    assert parts["kd"].item() == pytest.approx(expected.item(), abs=1e-6)
    assert parts["top1"].item() == 0.0


def test_reverse_kl_is_zero_for_equal_distributions_and_positive_otherwise():
    logits = torch.randn(2, 3, 5)
    mask = torch.ones(2, 3)
    assert reverse_kl(logits, logits, mask).item() == pytest.approx(0.0, abs=1e-6)
    assert reverse_kl(logits, logits.flip(-1), mask).item() > 0


@pytest.mark.parametrize("mode", ["offline", "on_policy"])
def test_distillation_moves_the_student_towards_the_teacher(make_run, read_metrics, mode):
    steps = 60
    run = make_run("distill", max_steps=steps, test_freq=steps, save_freq=0, distill_mode=mode)
    run_job(run, run / "metrics.jsonl")
    m = read_metrics(run / "metrics.jsonl")
    assert m[steps]["val/distill/kd_loss"] < 0.85 * m[0]["val/distill/kd_loss"]
    assert m[steps]["val/distill/top1_agreement"] > m[0]["val/distill/top1_agreement"] + 0.1
    head = sum(m[s]["distill/kd_loss"] for s in range(1, 11)) / 10
    tail = sum(m[s]["distill/kd_loss"] for s in range(steps - 9, steps + 1)) / 10
    assert tail < head
    assert m[steps]["val-core/demo/arith/win_rate_n"] > 0  # generation win rate against `chosen`
    parts = [m[steps][f"val-core/demo/arith/win_rate_{k}"] for k in ("wins", "ties", "losses")]
    assert sum(parts) == m[steps]["val-core/demo/arith/win_rate_n"]  # logged beside the rate, adding up
    assert 0 <= m[steps]["val-core/demo/arith/accuracy"] <= 1
