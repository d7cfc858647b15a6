"""Export of VERL FSDP checkpoints: the merger command, and the LoRA alpha fix, run for real on CPU.

The checkpoint is built the way verl's FSDP checkpoint manager lays it out for world size 1
(`model_world_size_1_rank_0.pt` holding plain tensors, `fsdp_config.json`, `huggingface/`).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from training.backends.base import BackendError
from training.backends.verl_export import patch_adapter_config, plan_export, run_export, write_lora_train_meta


def _fake_verl_checkpoint(run_dir: Path, step: int, model_dir: Path, lora_rank: int = 0) -> tuple[Path, dict]:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    if lora_rank:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=lora_rank, lora_alpha=4 * lora_rank, target_modules=["q_proj"]))
        for name, p in model.named_parameters():
            if "lora_B" in name:
                torch.nn.init.normal_(p)  # non-zero adapters, so a wrong alpha would show
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    actor = run_dir / "checkpoints" / f"global_step_{step}" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    torch.save(state, actor / "model_world_size_1_rank_0.pt")
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        if (model_dir / name).exists():
            shutil.copy(model_dir / name, actor / "huggingface" / name)
    (run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").write_text(str(step))
    return actor, state


def test_plan_builds_the_merger_command(make_run, tiny_model_dir):
    spec, run_dir = make_run()
    actor, _ = _fake_verl_checkpoint(run_dir, 5, tiny_model_dir)
    plan = plan_export(spec, run_dir, 5)
    assert plan.argv[1:] == ["-m", "verl.model_merger", "merge", "--backend", "fsdp",
                             "--local_dir", str(actor.resolve()),
                             "--target_dir", str((run_dir / "export" / "global_step_5").resolve())]
    assert not (actor / "lora_train_meta.json").exists()  # full fine-tune: nothing to add


def test_export_of_a_missing_checkpoint_is_refused(make_run):
    spec, run_dir = make_run()
    with pytest.raises(BackendError, match="no actor/ folder"):
        plan_export(spec, run_dir, 7)


@pytest.mark.slow  # runs verl's merger in a subprocess (~5 s of CPU)
def test_lora_export_reproduces_the_weights_and_keeps_the_trained_alpha(make_run, tiny_model_dir, base_spec):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    spec, run_dir = make_run({"hp": {**base_spec["hp"], "lora": {"rank": 4, "alpha": 16, "targets": "q_proj"}}})
    actor, state = _fake_verl_checkpoint(run_dir, 6, tiny_model_dir, lora_rank=4)
    out = run_export(spec, run_dir, 6, timeout=240)
    assert json.loads((actor / "lora_train_meta.json").read_text())["lora_alpha"] == 16
    adapter_cfg = json.loads((out / "lora_adapter" / "adapter_config.json").read_text())
    assert adapter_cfg["lora_alpha"] == 16 and adapter_cfg["r"] == 4
    adapter = load_file(out / "lora_adapter" / "adapter_model.safetensors")
    lora_b = next(k for k in state if "lora_B" in k)
    # the merger saves bf16 (base_model_merger.save_hf_model_and_tokenizer)
    assert torch.equal(adapter[lora_b.replace(".default.weight", ".weight")], state[lora_b].to(torch.bfloat16))
    merged = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).state_dict()
    for key, value in state.items():
        if "lora_" in key:
            continue
        name = key.replace("base_model.model.", "").replace(".base_layer.", ".")
        assert torch.equal(merged[name], value.to(torch.bfloat16).float()), name


def test_existing_lora_meta_from_verl_is_kept(tmp_path):
    (tmp_path / "lora_train_meta.json").write_text(json.dumps({"r": 8, "lora_alpha": 32}))
    assert write_lora_train_meta(tmp_path, 8, 16) is None
    assert json.loads((tmp_path / "lora_train_meta.json").read_text())["lora_alpha"] == 32


def test_adapter_config_alpha_is_patched_after_a_merge_that_lost_it(tmp_path):
    (tmp_path / "lora_adapter").mkdir()
    (tmp_path / "lora_adapter" / "adapter_config.json").write_text(json.dumps({"r": 8, "lora_alpha": 0}))
    assert patch_adapter_config(tmp_path, 16.0) is True
    assert json.loads((tmp_path / "lora_adapter" / "adapter_config.json").read_text())["lora_alpha"] == 16.0
    assert patch_adapter_config(tmp_path, 16.0) is False  # already right
