"""Resuming a checkpoint with a changed hp.lr (rollback edit, KL-guard restore) trains at the new lr."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from training.local.config import HParams
from training.local.data import EpochSampler
from training.local.loop import make_optimizer, restore


def _algo(lr: float):
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    opt, sched = make_optimizer(model, HParams(lr=lr, warmup_steps=4))
    return SimpleNamespace(model=model, optimizer=opt, scheduler=sched)


def test_restore_keeps_the_warmup_position_but_takes_the_jobs_lr(tmp_path):
    old = _algo(1e-3)
    for _ in range(2):
        old.model(torch.ones(1, 2)).sum().backward()
        old.optimizer.step()
        old.scheduler.step()
    sampler = EpochSampler(10, 2, 1)
    state = {"step": 2, "kind": "grpo", "optimizer": old.optimizer.state_dict(),
             "scheduler": old.scheduler.state_dict(), "sampler": sampler.state_dict()}
    torch.save(state, tmp_path / "trainer_state.pt")
    new = _algo(2.5e-4)
    job = SimpleNamespace(resume_from=tmp_path, kind="grpo", hp=HParams(lr=2.5e-4, warmup_steps=4))
    assert restore(job, new, EpochSampler(10, 2, 1))[0] == 2
    assert new.scheduler.get_last_lr()[0] == pytest.approx(2.5e-4 * 3 / 4)  # step 3 of a 4-step warm-up
    assert new.optimizer.param_groups[0]["lr"] == pytest.approx(2.5e-4 * 3 / 4)
    assert new.optimizer.state_dict()["state"]  # Adam moments still come from the checkpoint
    new.optimizer.step()
    new.scheduler.step()
    assert new.scheduler.get_last_lr()[0] == pytest.approx(2.5e-4)
