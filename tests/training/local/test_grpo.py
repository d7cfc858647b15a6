"""GRPO: VERL's maths on hand-computed values, and a seeded demo run that learns."""
from __future__ import annotations

import math

import pytest
import torch

from training.local.config import HParams
from training.local.grpo import actor_config, group_advantages, outcome_rewards, policy_loss, tied_group_share
from training.local.train import run_job
from training.models import load_model_and_tokenizer


def test_outcome_rewards_sit_on_the_last_response_token():
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]], dtype=torch.float32)
    out = outcome_rewards(torch.tensor([0.5, 2.0]), mask)
    assert out.tolist() == [[0, 0, 0.5, 0], [2.0, 0, 0, 0]]


def test_group_advantages_match_hand_computed_values():
    # groups [1,0,0,1] and [0,0,0,1]: mean .5 / .25, unbiased std .5774 / .5
    scores = torch.tensor([1.0, 0, 0, 1, 0, 0, 0, 1])
    mask = torch.ones(8, 3)
    mask[1, 2] = 0
    adv = group_advantages(scores, mask, group_size=4)
    first = [a[0].item() for a in adv]
    expected = [0.866, -0.866, -0.866, 0.866, -0.5, -0.5, -0.5, 1.5]
    assert first == pytest.approx(expected, abs=1e-3)
    assert adv[1, 2].item() == 0.0  # masked tokens carry no advantage
    assert adv[0].tolist() == pytest.approx([0.866] * 3, abs=1e-3)  # same value on every token


def test_tied_group_share_counts_groups_whose_rewards_all_tie():
    scores = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 0.5, 0.0, 0.0, 0.0, 0.3, 0.3, 0.4])
    assert tied_group_share(scores, 3) == pytest.approx(2 / 4)  # groups 1 and 3 tie; 2 and 4 differ
    assert tied_group_share(torch.zeros(4), 2) == 1.0


def test_policy_loss_clips_and_adds_low_var_kl():
    hp = HParams(clip_ratio=0.2, kl_coef=0.1, loss_agg_mode="token-mean", batch_size=1)
    cfg = actor_config(hp, rollout_n=2, micro_batch=2)
    cfg.global_batch_info.update(dp_size=1, batch_num_tokens=2, global_batch_size=2)
    old = torch.log(torch.tensor([[0.5], [0.5]]))
    new = torch.log(torch.tensor([[0.8], [0.5]]))  # ratio 1.6 on row 0 (clipped to 1.2), 1.0 on row 1
    ref = torch.log(torch.tensor([[0.4], [0.5]]))
    adv = torch.tensor([[1.0], [-1.0]])
    mask = torch.ones(2, 1)
    loss, m = policy_loss(cfg, new, old, ref, adv, mask, entropy=None)
    pg = (-1.2 + 1.0) / 2  # max(-A r, -A clip(r)) per token, token-mean
    log_ratio = math.log(0.4 / 0.8)  # ref - policy, row 0; row 1 is 0
    k3 = (math.exp(log_ratio) - log_ratio - 1) / 2
    assert m["actor/pg_loss"] == pytest.approx(pg, abs=1e-6)
    assert m["actor/kl_loss"] == pytest.approx(k3, abs=1e-6)
    assert m["actor/pg_clipfrac"] == pytest.approx(0.5)
    assert loss.item() == pytest.approx(pg + 0.1 * k3, abs=1e-6)


def test_micro_batches_give_the_same_gradient_as_one_batch():
    torch.manual_seed(0)
    hp = HParams(kl_coef=0.05, loss_agg_mode="token-mean", batch_size=2)
    logits = torch.randn(4, 3, requires_grad=True)
    old, ref = torch.randn(4, 3), torch.randn(4, 3)
    adv = torch.randn(4, 1).expand(4, 3)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0]], dtype=torch.float32)

    def grad(chunks):
        logits.grad = None
        cfg = actor_config(hp, 2, 4 // chunks)
        cfg.global_batch_info.update(dp_size=1, batch_num_tokens=int(mask.sum()), global_batch_size=4)
        for s in [slice(i, i + 4 // chunks) for i in range(0, 4, 4 // chunks)]:
            policy_loss(cfg, logits[s], old[s], ref[s], adv[s], mask[s], None)[0].backward()
        return logits.grad.clone()

    assert torch.allclose(grad(1), grad(2), atol=1e-6)


@pytest.mark.slow
def test_demo_grpo_run_raises_the_reward(make_run, read_metrics, demo_models):
    run = make_run("grpo", max_steps=150, test_freq=0, save_freq=150)
    run_job(run, run / "metrics.jsonl")
    m = read_metrics(run / "metrics.jsonl")
    scores = [m[s]["critic/score/mean"] for s in range(1, 151)]
    first, last = sum(scores[:25]) / 25, sum(scores[-25:]) / 25
    assert first < 0.2 < 0.4 < last, (first, last)
    for key in ("actor/kl_loss", "actor/pg_loss", "actor/entropy", "actor/grad_norm", "actor/lr", "perf/throughput",
                "response_length/mean", "timing_s/step", "critic/zero_variance_group_share",
                "actor/ppo_kl", "garbled/share", "garbled/repetition_share"):  # what the spike and garbled rules read
        assert m[150][key] is not None, key
    before, _ = load_model_and_tokenizer(demo_models["policy"])
    after, _ = load_model_and_tokenizer(run / "checkpoints" / "global_step_150" / "model")
    delta = sum((a - b).abs().sum().item() for a, b in zip(after.parameters(), before.parameters(), strict=True))
    assert delta > 0
