"""resolve_config: defaults < preset < kind < overrides, every refusal on its field, the KL warning."""
from __future__ import annotations

import pytest

from training.hparams import (
    BY_KEY,
    SETTINGS,
    base_config,
    flatten_overrides,
    resolve_config,
)
from training.jobconfig import parse_set_args
from training.presets import DEFAULT_HP, PRESETS


def test_product_defaults_are_the_issue_values():
    cfg, errors, warnings = resolve_config("grpo", "qwen2.5-0.5b-1gpu", {}, backend="verl")
    assert DEFAULT_HP["lr"] == 1e-6 and DEFAULT_HP["kl_coef"] == 0.02 and DEFAULT_HP["batch_size"] == 64
    assert DEFAULT_HP["epochs"] == 3 and DEFAULT_HP["max_seq_len"] == 2048
    assert DEFAULT_HP["distill_temperature"] == 2.0 and DEFAULT_HP["distill_alpha"] == 0.5
    assert cfg["guard_rules"] == [{"rule": "kl"}]  # the KL guard: above 0.1 restores
    assert errors == {} and warnings == {}


def test_preset_then_kind_then_overrides():
    cfg, errors, _ = resolve_config("grpo", "demo-cpu", {"lr": "0.002", "lora.rank": 4, "verl": {"nnodes": 1}})
    assert errors == {}
    assert cfg["hp"]["lr"] == 0.002  # override (string coerced)
    assert cfg["hp"]["group_size"] == 8  # demo-cpu's GRPO value
    assert cfg["hp"]["lora"] == {"rank": 4, "alpha": 16, "targets": "all-linear"}
    distill = base_config("distill", "demo-cpu")["hp"]
    assert distill["max_steps"] == 150 and distill["lr"] == 3e-3


def test_every_preset_is_valid_for_its_backend():
    for name, preset in PRESETS.items():
        for kind in ("grpo", "distill", "reward_model"):
            if preset["backend"] == "verl" and kind == "reward_model":
                continue
            overrides = {"verl.n_gpus_per_node": 2} if kind == "distill" and name == "qwen2.5-0.5b-1gpu" else {}
            _, errors, _ = resolve_config(kind, name, overrides, backend=preset["backend"])
            assert errors == {}, (name, kind, errors)


@pytest.mark.parametrize("overrides, backend, field, words", [
    ({"group_size": 1}, "local", "group_size", "at least 2"),
    ({"batch_size": 64, "mini_batch_size": 24}, "local", "batch_size", "not divisible by the mini batch 24"),
    ({"mini_batch_size": 128}, "local", "mini_batch_size", "cannot be larger"),
    ({"batch_size": 16, "group_size": 8, "micro_batch_size": 5}, "local", "micro_batch_size", "not divisible"),
    ({"batch_size": 3, "group_size": 3, "verl.n_gpus_per_node": 2, "device": "cuda"}, "verl", "batch_size",
     "split evenly over 2 GPU"),
    ({"max_prompt_length": 512, "max_response_length": 2000, "max_seq_len": 2048}, "local", "max_seq_len",
     "cannot hold"),
    ({"lr": 0}, "local", "lr", "between 0 and 1"),
    ({"kl_coef": -0.1}, "local", "kl_coef", "negative"),
    ({"clip_ratio": 1.5}, "local", "clip_ratio", "between 0 and 1"),
    ({"temperature": 0}, "local", "temperature", "above 0"),
    ({"device": "cpu", "verl.rollout_engine": "vllm"}, "verl", "verl.rollout_engine", "vLLM needs CUDA GPUs"),
    ({"device": "cpu", "lora.rank": 8}, "verl", "lora.rank", "CPU rollout syncs full weights"),
    ({"guard_rules": [{"rule": "kl", "lr_factor": 2}]}, "local", "guard_rules", "lr_factor must be in (0, 1)"),
    ({"guard_rules": [{"rule": "kl", "action": "restore"}], "save_freq": 0}, "local", "guard_rules.kl",
     "saves none"),
    ({"lora.rank": "four"}, "local", "lora.rank", "whole number"),
    ({"nonsense": 1}, "local", "nonsense", "Unknown setting"),
])
def test_inconsistent_values_are_refused_on_their_field(overrides, backend, field, words):
    _, errors, _ = resolve_config("grpo", "demo-cpu", overrides, backend=backend)
    assert field in errors, errors
    assert words in errors[field]


def test_verl_rehearses_on_cpu_with_the_demo_preset():
    config, errors, _ = resolve_config("grpo", "demo-cpu", {}, backend="verl")
    assert errors == {} and config["hp"]["device"] == "cpu"


def test_verl_distillation_on_cpu_needs_a_per_token_loss():
    hp = {"device": "cpu", "distill_mode": "on_policy"}
    _, errors, _ = resolve_config("distill", "demo-cpu", {**hp, "distill_loss": "forward_kl_topk"}, backend="verl")
    assert "vLLM or SGLang" in errors["distill_loss"] and "verl.n_gpus_per_node" not in errors
    _, errors, _ = resolve_config("distill", "demo-cpu", {**hp, "distill_loss": "k3"}, backend="verl")
    assert errors == {}


def test_distill_and_reward_model_rules():
    _, errors, _ = resolve_config("distill", "demo-cpu", {"distill_alpha": 1.5}, context={"has_teacher": False})
    assert "teacher_model" in errors and "distill_alpha" in errors
    _, errors, _ = resolve_config("distill", "qwen2.5-0.5b-1gpu", {"distill_mode": "offline"}, backend="verl")
    assert "on_policy" in errors["distill_mode"]
    _, errors, _ = resolve_config("reward_model", "demo-cpu", {}, backend="verl")
    assert "local backend" in errors["backend"]
    # group size does not matter outside GRPO
    _, errors, _ = resolve_config("reward_model", "demo-cpu", {"group_size": 1})
    assert errors == {}


def test_missing_reward_and_wrong_dataset_kind():
    _, errors, _ = resolve_config("grpo", "demo-cpu", {}, context={"has_reward": False, "dataset_kind": "preference"})
    assert "reward" in errors["reward_spec"] and "preference pairs" in errors["dataset_version"]
    _, errors, _ = resolve_config("reward_model", "demo-cpu", {}, context={"dataset_kind": "prompts"})
    assert "preference pairs" in errors["dataset_version"]
    _, errors, _ = resolve_config("distill", "demo-cpu", {}, context={"dataset_kind": "prompts", "has_teacher": True})
    assert errors == {}


@pytest.mark.parametrize("kl, warned", [(0.02, False), (0.01, False), (0.05, False), (0.005, True), (0.2, True)])
def test_kl_outside_recommended_range_warns_but_is_accepted(kl, warned):
    cfg, errors, warnings = resolve_config("grpo", "demo-cpu", {"kl_coef": kl})
    assert errors == {}
    assert cfg["hp"]["kl_coef"] == kl
    assert ("kl_coef" in warnings) is warned


def test_optional_settings_accept_blank_and_none():
    cfg, errors, _ = resolve_config("grpo", "demo-cpu", {"max_steps": "", "mini_batch_size": "none",
                                                         "keep_last_k": None})
    assert errors == {}
    assert cfg["hp"]["max_steps"] is None and cfg["hp"]["mini_batch_size"] is None
    _, errors, _ = resolve_config("grpo", "demo-cpu", {"lr": ""})
    assert "required" in errors["lr"]


def test_flatten_and_parse_set_args():
    assert flatten_overrides({"hp": {"lr": 1}, "lora": {"rank": 2}, "verl_nnodes": 3}) == {
        "lr": 1, "lora.rank": 2, "verl.nnodes": 3}
    assert parse_set_args(["lr=1e-5", "lora.targets=q_proj,v_proj"]) == {"lr": "1e-5",
                                                                          "lora.targets": "q_proj,v_proj"}
    with pytest.raises(ValueError, match="key=value"):
        parse_set_args(["lr"])


def test_every_setting_has_a_default():
    cfg = base_config("grpo", "demo-cpu")
    for s in SETTINGS:
        section = cfg[s.section]
        node = section
        for part in s.path[:-1]:
            node = node[part]
        assert s.path[-1] in node, s.key
    assert BY_KEY["verl.nnodes"].form_name == "verl_nnodes"


@pytest.mark.parametrize("overrides, field, words", [
    ({"device": "cpu", "verl.strategy": "megatron", "verl.rollout_engine": "hf"}, "verl.strategy",
     "Megatron needs GPUs"),
    ({"device": "cpu", "verl.strategy": "fsdp", "verl.rollout_engine": "hf"}, "verl.strategy", "FSDP2"),
    ({"device": "cpu", "verl.strategy": "fsdp2", "verl.rollout_engine": "sglang"}, "verl.rollout_engine",
     "SGLang needs CUDA GPUs"),
    ({"device": "cuda", "verl.rollout_engine": "hf"}, "verl.rollout_engine", "only with device cpu"),
    ({"device": "auto", "verl.rollout_engine": "hf"}, "verl.rollout_engine", "only with device cpu"),
    ({"verl.strategy": "deepspeed"}, "verl.strategy", "must be one of fsdp, fsdp2, megatron"),
])
def test_strategy_engine_and_device_combinations_are_checked(overrides, field, words):
    _, errors, _ = resolve_config("grpo", "qwen2.5-0.5b-1gpu", overrides, backend="verl")
    assert words in errors[field], errors


@pytest.mark.parametrize("overrides", [
    {"device": "cpu", "verl.strategy": "fsdp2", "verl.rollout_engine": "hf"},
    {"device": "cuda", "verl.strategy": "megatron", "verl.rollout_engine": "vllm"},
    {"device": "cuda", "verl.strategy": "fsdp2", "verl.rollout_engine": "sglang"},
    {"device": "auto", "verl.strategy": "fsdp", "verl.rollout_engine": "vllm"},
])
def test_valid_strategy_engine_and_device_combinations_pass(overrides):
    _, errors, _ = resolve_config("grpo", "qwen2.5-0.5b-1gpu", overrides, backend="verl")
    assert errors == {}


def test_a_setting_verl_has_no_key_for_is_refused_for_verl_only():
    _, errors, _ = resolve_config("distill", "qwen2.5-0.5b-1gpu", {"distill_temperature": 3,
                                                                   "verl.n_gpus_per_node": 2}, backend="verl")
    assert "not used by VERL" in errors["distill_temperature"]
    _, errors, _ = resolve_config("distill", "demo-cpu", {"distill_temperature": 3})
    assert errors == {}


def test_presets_name_only_schema_settings_and_defaults_come_from_the_schema():
    from training.hparams import BY_KEY as SCHEMA
    from training.hparams import defaults
    from training.local.config import HParams

    for name, preset in PRESETS.items():
        layers = [preset.get("hp") or {}, *(preset.get("kinds") or {}).values()]
        keys = [k for layer in layers for k, v in layer.items() for k in ([f"lora.{x}" for x in v] if k == "lora"
                                                                           else [k])]
        keys += [f"verl.{k}" for k in preset.get("verl") or {}]
        assert all(k in SCHEMA for k in keys), (name, [k for k in keys if k not in SCHEMA])
    local = HParams()
    for key, value in defaults("hp").items():
        if hasattr(local, key):
            assert getattr(local, key) == value, key
    assert defaults("hp") == DEFAULT_HP


@pytest.mark.parametrize("overrides, field, words", [
    ({"device": "cuda", "verl.strategy": "megatron", "lora.rank": 8}, "lora.rank", "Megatron does not use"),
    ({"lora.rank": 8}, "lora.rank", "CPU rollout syncs full weights"),
])
def test_verl_on_cpu_and_megatron_limits(overrides, field, words):
    _, errors, _ = resolve_config("grpo", "demo-cpu", overrides, backend="verl")
    assert words in errors[field], errors


def test_several_cpu_nodes_are_a_ray_cluster_job():
    _, errors, warnings = resolve_config("grpo", "demo-cpu", {"verl.nnodes": 2}, backend="verl")
    assert "verl.nnodes" not in errors and "RAY_ADDRESS" in warnings["verl.nnodes"]


def test_the_demo_preset_rehearses_verl_on_cpu():
    config, errors, _ = resolve_config("grpo", "demo-cpu", {}, backend="verl")
    assert errors == {}
    assert (config["hp"]["device"], config["verl"]["strategy"], config["verl"]["rollout_engine"]) == \
        ("cpu", "fsdp2", "hf")


@pytest.mark.parametrize("backend", ["local", "verl"])
def test_reward_workers_is_a_cpu_budget_on_both_backends(backend):
    cfg, errors, _ = resolve_config("grpo", "demo-cpu", {"reward_workers": "3"}, backend=backend)
    assert errors == {} and cfg["hp"]["reward_workers"] == 3
    cfg, errors, _ = resolve_config("grpo", "demo-cpu", {"reward_workers": ""}, backend=backend)
    assert errors == {} and cfg["hp"]["reward_workers"] is None  # blank: min(CPUs, 4)
    for bad in ("0", "65", "2.5"):
        _, errors, _ = resolve_config("grpo", "demo-cpu", {"reward_workers": bad}, backend=backend)
        assert "reward_workers" in errors, bad
    assert BY_KEY["reward_workers"].offered("grpo", backend) and not BY_KEY["reward_workers"].offered(
        "reward_model", backend)


def test_reusing_the_rollouts_log_probs_is_the_smollm2_rehearsals_choice_and_a_warning_on_gpus():
    config, errors, warnings = resolve_config("grpo", "smollm2-cpu", {}, backend="verl")
    assert errors == {} and config["verl"]["reuse_rollout_logprobs"] is True and warnings == {}
    config, errors, _ = resolve_config("grpo", "qwen2.5-0.5b-1gpu", {}, backend="verl")
    assert config["verl"]["reuse_rollout_logprobs"] is False
    _, errors, warnings = resolve_config("grpo", "qwen2.5-0.5b-1gpu", {"verl.reuse_rollout_logprobs": True},
                                         backend="verl")
    assert errors == {} and "off-policy" in warnings["verl.reuse_rollout_logprobs"]
