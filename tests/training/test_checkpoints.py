"""Checkpoint inventory, retention planning, atomic publishing and HF export."""
from __future__ import annotations

import json

import pytest
import torch

from training import checkpoints
from training.models import build_tiny_model, load_model_and_tokenizer


def test_plan_retention_keeps_last_k_and_protected():
    assert checkpoints.plan_retention([10, 20, 30, 40, 50], 2, protected=[20]) == [10, 30]
    assert checkpoints.plan_retention([3, 1, 2], 5) == []
    assert checkpoints.plan_retention([1, 2, 3], None) == []
    assert checkpoints.plan_retention([1, 2, 3], 0) == []
    assert checkpoints.plan_retention([1, 2, 3], 1, protected=[1, 2]) == []


def test_discover_reads_local_and_verl_layouts(tmp_path):
    root = tmp_path / "checkpoints"
    (root / "global_step_5" / "actor").mkdir(parents=True)
    (root / "global_step_5" / "data.pt").write_bytes(b"x" * 10)
    checkpoints.publish_checkpoint(root, 10, lambda d: (d / "trainer_state.pt").write_bytes(b"y" * 7),
                                   {"kind": "grpo", "format": "local", "lora": True})
    (root / ".tmp-global_step_15.123").mkdir()  # a killed save
    infos = checkpoints.discover(root)
    assert [(c.step, c.format, c.lora) for c in infos] == [(5, "verl", False), (10, "local", True)]
    assert infos[0].size_bytes == 10 and infos[1].size_bytes > 7
    assert checkpoints.latest_step(root) == 10
    assert checkpoints.step_of(root / "global_step_10") == 10


def test_a_failed_save_leaves_the_previous_state(tmp_path):
    root = tmp_path / "checkpoints"
    checkpoints.publish_checkpoint(root, 1, lambda d: None, {"format": "local"})

    def boom(d):
        (d / "half").write_text("x")
        raise KeyboardInterrupt  # stands in for a kill mid-save

    with pytest.raises(KeyboardInterrupt):
        checkpoints.publish_checkpoint(root, 2, boom, {"format": "local"})
    assert [c.step for c in checkpoints.discover(root)] == [1]
    assert checkpoints.latest_step(root) == 1
    checkpoints.clean_stale_temp(root)
    assert sorted(p.name for p in root.iterdir()) == ["global_step_1", "latest_checkpointed_iteration.txt"]


def test_apply_retention_reads_protected_json(tmp_path):
    root = tmp_path / "checkpoints"
    for step in (1, 2, 3, 4):
        checkpoints.publish_checkpoint(root, step, lambda d: None, {"format": "local"})
    (root / "protected.json").write_text(json.dumps([1]))
    assert checkpoints.apply_retention(root, 2) == [2]
    assert [c.step for c in checkpoints.discover(root)] == [1, 3, 4]


def test_retention_of_an_attempt_never_deletes_another_attempts_checkpoints(tmp_path):
    """An orphaned trainer far ahead (steps 1200+) must not delete the resumed attempt's checkpoints."""
    root = tmp_path / "checkpoints"
    for step, attempt in ((600, 2), (650, 2), (1200, 1), (1300, 1), (1400, 1)):
        checkpoints.publish_checkpoint(root, step, lambda d: None, {"format": "local", "attempt": attempt})
    checkpoints.publish_checkpoint(root, 100, lambda d: None, {"format": "local"})  # written before attempts
    assert checkpoints.apply_retention(root, 2, attempt=1) == [1200]
    assert checkpoints.apply_retention(root, 2, attempt=2) == []
    assert [c.step for c in checkpoints.discover(root)] == [100, 600, 650, 1300, 1400]
    assert checkpoints.current_attempt({"WORKBENCH_ATTEMPT_DIR": "/runs/acme/3/attempts/2"}) == 2
    assert checkpoints.current_attempt({}) is None


def test_export_merges_a_lora_adapter(tmp_path):
    base = build_tiny_model(tmp_path / "base", hidden=32, layers=1)
    model, tok = load_model_and_tokenizer(base, lora={"rank": 4, "alpha": 8, "targets": "all-linear"})
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.add_(0.05)  # make the adapter do something

    def write(d):
        model.save_pretrained(d / "model")
        tok.save_pretrained(d / "model")

    ckpt = checkpoints.publish_checkpoint(tmp_path / "checkpoints", 3, write,
                                          {"kind": "grpo", "format": "local", "lora": True, "base_model": str(base)})
    merged_dir = checkpoints.export_hf(ckpt, tmp_path / "export" / "merged", merge_lora=True)
    adapter_dir = checkpoints.export_hf(ckpt, tmp_path / "export" / "adapter", merge_lora=False)
    assert (adapter_dir / "adapter_config.json").exists()
    merged, _ = load_model_and_tokenizer(merged_dir)
    ids = tok(["1+2="], return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.allclose(merged(ids).logits, model(ids).logits, atol=1e-5)
        plain, _ = load_model_and_tokenizer(base)
        assert not torch.allclose(plain(ids).logits, model(ids).logits, atol=1e-5)
