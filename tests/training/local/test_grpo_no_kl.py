"""kl_coef = 0 on the local backend means what it means on VERL (use_kl_loss off): no KL term, no reference
model loaded, no KL metric, and no per-token KL in the rollout store; the policy still learns."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from training.local.config import HParams, JobError
from training.local.grpo import actor_config, policy_loss
from training.local.loop import Runtime
from training.local.train import run_job


def test_no_kl_term_in_the_loss_without_a_reference():
    hp = HParams(kl_coef=0.0, batch_size=1)
    cfg = actor_config(hp, rollout_n=2, micro_batch=2)
    cfg.global_batch_info.update(dp_size=1, batch_num_tokens=2, global_batch_size=2)
    logp = torch.log(torch.tensor([[0.8], [0.5]]))
    loss, m = policy_loss(cfg, logp, logp, None, torch.tensor([[1.0], [-1.0]]), torch.ones(2, 1), entropy=None)
    assert not cfg.use_kl_loss and "actor/kl_loss" not in m
    assert loss.item() == pytest.approx(m["actor/pg_loss"])


@pytest.mark.slow
def test_a_run_without_kl_loads_no_reference_model(make_run, read_metrics, monkeypatch):
    loaded: list[Path] = []
    real = Runtime.load_frozen

    def counting(self, path):
        loaded.append(Path(path))
        return real(self, path)

    monkeypatch.setattr(Runtime, "load_frozen", counting)
    run = make_run("grpo", max_steps=100, test_freq=0, save_freq=100, kl_coef=0.0)
    run_job(run, run / "metrics.jsonl")
    assert loaded == []  # validation is off: nothing asked for the base model either
    metrics = read_metrics(run / "metrics.jsonl")
    assert not any("actor/kl_loss" in m or "actor/kl_coef" in m for m in metrics.values())
    first = sum(metrics[s]["critic/score/mean"] for s in range(1, 21)) / 20
    last = sum(metrics[s]["critic/score/mean"] for s in range(81, 101)) / 20
    assert last > max(0.3, first + 0.15), (first, last)  # learning happened, with the KL term off
    row = json.loads((run / "samples" / "rollout" / "100.jsonl").read_text().splitlines()[0])
    assert "token_logratio" not in row and row["token_entropy"]


def test_the_local_config_is_the_schemas():
    from training.hparams import SETTINGS

    local = {s.path[0] for s in SETTINGS if s.section == "hp" and s.local}
    assert set(vars(HParams())) == local  # every local setting, nothing listed by hand
    with pytest.raises(JobError, match="hp.kl_loss_type: must be one of low_var_kl, kl, abs, mse"):
        HParams(kl_loss_type="k3")  # the form's four estimators, no more
    with pytest.raises(JobError, match="hp.loss_agg_mode"):
        HParams(loss_agg_mode="token-sum")
    with pytest.raises(JobError, match="hp.batch_size: expected a whole number"):
        HParams(batch_size="1.5")
    assert HParams(lr="2e-5", lora={"rank": "4"}).lora == {"rank": 4, "alpha": 16, "targets": "all-linear"}
