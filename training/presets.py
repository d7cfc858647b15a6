"""Launch presets, and where a job's config starts (a preset's, or a job's stored one): pure Python, no Django.

A preset is a starting point for the launch form: it names values of settings defined in
`training.settings_table` (the defaults come from there), and the user's own edits replace the preset.
`kinds` holds per-kind values (e.g. the demo's GRPO and distillation steps differ). `demo-cpu` is
also what `training.demo` writes into a demo run directory.
"""
from __future__ import annotations

import copy
from typing import Any

from training.settings_table import SECTIONS, defaults

# The schema's defaults, by section (every preset starts from these).
DEFAULT_HP: dict[str, Any] = defaults("hp")
DEFAULT_VERL: dict[str, Any] = defaults("verl")

_DEMO_COMMON = {"seed": 1, "device": "cpu", "dtype": "float32", "max_prompt_length": 8, "max_response_length": 4,
                "max_seq_len": 16, "epochs": 1}

# The KL guard is the built-in health rule "kl" (training.guard_rules.BUILTIN, run by webapp.monitoring).
# The seed's recipe on GPUs: KL above 0.1 for 3 logged steps restores the last good checkpoint with lr × 0.5.
GPU_GUARD_RULES: list[dict[str, Any]] = [{"rule": "kl"}]

# SmolLM2-135M-Instruct on the GSM8K-format word problems (`manage.py seed_demo --smollm2`): its chat template
# makes a prompt ~75-110 tokens; 128-token responses hold a short worked answer. Batch 8 x group 4 on two cores.
_SMOLLM2_COMMON = {"seed": 1, "device": "cpu", "dtype": "auto", "max_prompt_length": 192, "max_response_length": 128,
                   "max_seq_len": 320, "batch_size": 8, "micro_batch_size": 16, "epochs": 1, "max_steps": 60,
                   "save_freq": 20, "test_freq": 20, "keep_last_k": 2}
_SMOLLM2_KINDS: dict[str, dict[str, Any]] = {
    "grpo": {"group_size": 4, "kl_coef": 0.02, "kl_loss_type": "low_var_kl", "temperature": 1.0, "clip_ratio": 0.2,
             "loss_agg_mode": "token-mean"},
    # the 6-layer student of SmolLM2 (same tokenizer) learns from SmolLM2 on its own samples, as VERL does on CPU
    "distill": {"lr": 1e-4, "distill_mode": "on_policy", "distill_loss": "k3", "micro_batch_size": 8,
                "temperature": 1.0},
    "reward_model": {"lr": 1e-5, "batch_size": 16},
}
_SMOLLM2_GUARD_RULES: list[dict[str, Any]] = [{"rule": "kl", "action": "stop"}]
# VERL's CPU rehearsal samples in float32 with the trainer's weights: its log-probs are the old policy's already.
_SMOLLM2_VERL = {"strategy": "fsdp2", "rollout_engine": "hf", "reuse_rollout_logprobs": True}

# What each preset was made for ("model": a label and the parameter counts it suits): a model outside that range
# keeps the preset's lr and lengths only by mistake, so the launch form points at a preset that fits it.
_DEMO_MODEL = {"label": "the demo's tiny models", "parameters": (0, 20e6)}
_SMOLLM2_MODEL = {"label": "SmolLM2-135M-Instruct", "parameters": (50e6, 300e6)}
# The settings a preset sizes for its model: the ones to revisit when the model changes.
MODEL_SETTINGS = ("lr", "batch_size", "micro_batch_size", "group_size", "max_prompt_length", "max_response_length",
                  "max_seq_len", "lora.rank", "device", "dtype")

PRESETS: dict[str, dict[str, Any]] = {
    "demo-cpu": {
        "label": "Demo on CPU (tiny model, arithmetic; about a minute on 2 cores)",
        "model": _DEMO_MODEL,
        "backend": "local",
        "hp": {},
        "kinds": {
            "grpo": {**_DEMO_COMMON, "lr": 1e-3, "kl_coef": 0.02, "kl_loss_type": "low_var_kl", "batch_size": 16,
                     "group_size": 8, "temperature": 1.0, "clip_ratio": 0.2, "loss_agg_mode": "token-mean",
                     "max_steps": 300, "save_freq": 100, "test_freq": 50},
            "distill": {**_DEMO_COMMON, "lr": 3e-3, "batch_size": 16, "max_steps": 150, "distill_temperature": 2.0,
                        "distill_alpha": 0.5, "distill_mode": "offline", "temperature": 1.0, "save_freq": 50,
                        "test_freq": 25},
            "reward_model": {**_DEMO_COMMON, "lr": 2e-3, "batch_size": 32, "max_steps": 300, "save_freq": 100,
                             "test_freq": 50},
        },
        # At lr 1e-3 the tiny demo policy's KL to the reference climbs past 1 while the reward rises
        # (measured: 0.3 at step 25, 0.85 at step 75, 1.1 by step 100), so the KL guard is off by default
        # (its line is drawn at 2); turn it on to watch it act.
        "guard_rules": [{"rule": "kl", "enabled": False, "threshold": 2.0}],
        # With backend VERL: a rehearsal of VERL's own trainer on CPU.
        "verl": {"strategy": "fsdp2", "rollout_engine": "hf"},
    },
    "demo-cpu-guarded": {
        "label": "Demo on CPU with a health rule that trips: KL above 0.3 restores the last good checkpoint",
        "model": _DEMO_MODEL,
        "backend": "local",
        "hp": {},
        "kinds": {"grpo": {**_DEMO_COMMON, "lr": 1e-3, "kl_coef": 0.02, "kl_loss_type": "low_var_kl",
                           "batch_size": 16, "group_size": 8, "temperature": 1.0, "clip_ratio": 0.2,
                           "loss_agg_mode": "token-mean", "max_steps": 120, "save_freq": 10, "test_freq": 20,
                           # every checkpoint kept: retention must not delete the good one a restore needs
                           "keep_last_k": None}},
        # The demo's KL passes 0.3 around step 25: the rule restores the newest checkpoint where every
        # rule held with half the lr (at most twice); the other rules watch without acting.
        "guard_rules": [
            {"rule": "kl", "threshold": 0.3, "patience": 3, "action": "restore", "lr_factor": 0.5,
             "max_restores": 2},
            {"rule": "entropy_collapse"}, {"rule": "zero_variance_groups"}, {"rule": "response_clipping"},
            {"rule": "grad_norm_spike"}, {"rule": "reward_hacking"},
        ],
    },
    "smollm2-cpu": {
        "label": "SmolLM2-135M-Instruct on 2 CPU cores (GSM8K-format word problems; full fine-tuning)",
        "model": _SMOLLM2_MODEL,
        "backend": "local",
        "hp": {**_SMOLLM2_COMMON, "lr": 1e-6},
        "kinds": _SMOLLM2_KINDS,
        "guard_rules": _SMOLLM2_GUARD_RULES,
        "verl": _SMOLLM2_VERL,
    },
    "smollm2-cpu-lora": {
        "label": "SmolLM2-135M-Instruct on 2 CPU cores with LoRA (rank 16)",
        "model": _SMOLLM2_MODEL,
        "backend": "local",
        "hp": {**_SMOLLM2_COMMON, "lr": 5e-5, "lora": {"rank": 16, "alpha": 32, "targets": "all-linear"}},
        "kinds": {k: {key: v for key, v in hp.items() if key != "lr"} for k, hp in _SMOLLM2_KINDS.items()},
        "guard_rules": _SMOLLM2_GUARD_RULES,
        "verl": _SMOLLM2_VERL,
    },
    "qwen2.5-0.5b-1gpu": {
        "label": "Qwen2.5-0.5B-Instruct on one GPU (VERL, vLLM rollouts)",
        "model": {"label": "Qwen2.5-0.5B-Instruct", "parameters": (300e6, 1.5e9)},
        "backend": "verl",
        "hp": {"lr": 1e-6, "kl_coef": 0.02, "batch_size": 32, "mini_batch_size": 16, "micro_batch_size": 4,
               "group_size": 4, "epochs": 3, "max_prompt_length": 512, "max_response_length": 1024,
               "max_seq_len": 1536, "device": "cuda", "dtype": "bfloat16", "save_freq": 20, "test_freq": 10},
        "kinds": {"distill": {"distill_mode": "on_policy"}, "reward_model": {"lr": 1e-5, "batch_size": 16}},
        "verl": {"n_gpus_per_node": 1, "nnodes": 1, "tensor_model_parallel_size": 1,
                 "gpu_memory_utilization": 0.4},
        "guard_rules": GPU_GUARD_RULES,
    },
    "qwen2.5-7b-8gpu": {
        "label": "Qwen2.5-7B-Instruct on one 8-GPU node (VERL, vLLM rollouts, LoRA 64)",
        "model": {"label": "Qwen2.5-7B-Instruct", "parameters": (4e9, 12e9)},
        "backend": "verl",
        "hp": {"lr": 3e-6, "kl_coef": 0.02, "batch_size": 128, "mini_batch_size": 32, "micro_batch_size": 4,
               "group_size": 8, "epochs": 3, "max_prompt_length": 1024, "max_response_length": 1024,
               "max_seq_len": 2048, "device": "cuda", "dtype": "bfloat16", "save_freq": 20, "test_freq": 10,
               "lora": {"rank": 64, "alpha": 128, "targets": "all-linear"}},
        "kinds": {"distill": {"distill_mode": "on_policy"}, "reward_model": {"lr": 5e-6, "batch_size": 64}},
        "verl": {"n_gpus_per_node": 8, "nnodes": 1, "tensor_model_parallel_size": 2,
                 "gpu_memory_utilization": 0.5},
        "guard_rules": GPU_GUARD_RULES,
    },
}
DEFAULT_PRESET = "demo-cpu"


def preset_choices() -> list[tuple[str, str]]:
    return [(name, f"{name} — {p['label']}") for name, p in PRESETS.items()]


def made_for(preset: str, parameters: int | None) -> bool | None:
    """Whether `preset` was made for a model of this many parameters (None: unknown)."""
    low_high = (PRESETS.get(preset) or {}).get("model", {}).get("parameters")
    if parameters is None or low_high is None:
        return None
    return low_high[0] <= parameters < low_high[1]


def preset_for(parameters: int | None, backend: str | None = None, lora: bool | None = None) -> str | None:
    """The first preset made for a model of this size, one on `backend` and with (or without) LoRA first."""
    fitting = [name for name in PRESETS if made_for(name, parameters)]

    def rank(name: str) -> tuple[int, int]:
        p = PRESETS[name]
        has_lora = bool((p.get("hp") or {}).get("lora", {}).get("rank"))
        return (p.get("backend", "local") != backend if backend else 0, has_lora != lora if lora is not None else 0)

    return min(fitting, key=rank) if fitting else None


# -- where a job's config starts: a preset, or a job's stored config ---------------------------------------

def default_config() -> dict[str, dict[str, Any]]:
    return {section: defaults(section) for section in SECTIONS}


def base_config(kind: str, preset: str) -> dict[str, Any]:
    """The schema's defaults < preset < preset-for-kind (no validation)."""
    config = default_config()
    p = PRESETS.get(preset)
    if p is None:
        return config
    for layer in (p.get("hp") or {}, (p.get("kinds") or {}).get(kind) or {}):
        for k, v in layer.items():
            config["hp"][k] = copy.deepcopy(v)
    config["verl"].update(copy.deepcopy(p.get("verl") or {}))
    for key in ("guard_rules", "stall", "human_eval"):
        # A preset's health rules watch GRPO's metrics (KL to the reference, tied groups): GRPO jobs only.
        if p.get(key) and (key != "guard_rules" or kind == "grpo"):
            config[key] = copy.deepcopy(p[key])
    return config


def stored_config(stored: dict) -> dict[str, Any]:
    """A job's stored config over the schema's defaults: settings added since it was saved get theirs; what is
    not a setting (a key an older app wrote, the run-health blocks) is kept."""
    config = default_config()
    for section in SECTIONS:
        _merge(config[section], stored.get(section) or {})
    for key in ("guard_rules", "stall", "human_eval"):  # run health, declared per job (not settings)
        if stored.get(key):
            config[key] = copy.deepcopy(stored[key])
    return config


def _merge(into: dict, values: dict) -> None:
    for key, value in values.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)
