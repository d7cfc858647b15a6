"""Every setting the form offers for VERL reaches VERL: form value -> overrides -> VERL's composed config.

For each setting, a non-default value (as the form posts it, a string) is validated by the web
app's resolver, turned into the override list, composed with the installed verl's
ppo_trainer.yaml, and read back at the setting's Hydra path(s). The value must also differ from
VERL's own default there, so a dropped override cannot pass.
"""
from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl")

from omegaconf import OmegaConf  # noqa: E402

from training import hparams  # noqa: E402
from training.backends.verl_overrides import build_overrides  # noqa: E402
from training.backends.verl_plan import Resume, VerlPaths  # noqa: E402
from training.hparams import resolve_config  # noqa: E402

# value posted by the form, plus the other settings it needs to be valid
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "lr": ("3e-5", {}),
    "batch_size": ("32", {}),
    "mini_batch_size": ("16", {}),
    "micro_batch_size": ("2", {}),
    "epochs": ("2", {"max_steps": ""}),  # with max steps, VERL gets enough epochs for them (test_verl_epochs)
    "max_steps": ("12", {}),
    "weight_decay": ("0.05", {}),
    "warmup_steps": ("5", {}),
    "grad_clip": ("0.5", {}),
    "seed": ("7", {}),
    "max_prompt_length": ("256", {}),
    "max_response_length": ("384", {}),
    "max_seq_len": ("1536", {"max_prompt_length": 256, "max_response_length": 384}),
    "group_size": ("6", {"batch_size": 60, "mini_batch_size": 30}),
    "kl_coef": ("0.04", {}),
    "kl_loss_type": ("mse", {}),
    "temperature": ("0.7", {}),
    "clip_ratio": ("0.28", {}),
    "loss_agg_mode": ("seq-mean-token-mean", {}),
    "entropy_coeff": ("0.001", {}),
    "distill_mode": ("on_policy", {"verl.n_gpus_per_node": 2}),
    "distill_loss": ("mse", {"distill_mode": "on_policy", "verl.n_gpus_per_node": 2}),
    "lora.rank": ("8", {}),
    "lora.alpha": ("32", {"lora.rank": 8}),
    "lora.targets": ("q_proj,v_proj", {"lora.rank": 8}),
    "save_freq": ("7", {}),
    "test_freq": ("3", {}),
    "device": ("cpu", {"verl.strategy": "fsdp2", "verl.rollout_engine": "hf"}),
    "dtype": ("float32", {}),
    "verl.strategy": ("fsdp2", {}),
    "verl.rollout_engine": ("sglang", {}),
    "verl.n_gpus_per_node": ("2", {}),
    "verl.nnodes": ("2", {}),
    "verl.tensor_model_parallel_size": ("4", {"verl.n_gpus_per_node": 4}),
    "verl.gpu_memory_utilization": ("0.6", {}),
    "verl.use_v1": ("off", {}),  # the legacy trainer
    "verl.reuse_rollout_logprobs": ("on", {}),  # VERL's bypass mode
}
# Where a value lands in another unit or shape, and where several settings decide it together.
CONVERSIONS = {
    "lora.targets": lambda v: [t.strip() for t in v.split(",")],
    "distill_mode": lambda v: v == "on_policy",  # distillation.enabled
}
READERS = {  # planned settings: read back from where the plan puts them
    "batch_size": "data.train_batch_size",
    "mini_batch_size": "actor_rollout_ref.actor.ppo_mini_batch_size",
    "group_size": "actor_rollout_ref.rollout.n",
    "verl.n_gpus_per_node": "trainer.n_gpus_per_node",
    "verl.nnodes": "trainer.nnodes",
}
RUN = Path("/runs/5")
PATHS = VerlPaths(run_dir=RUN, train_parquet=RUN / "t.parquet", val_parquet=RUN / "v.parquet", reward_module=None,
                  attempt=1)
REWARD = {"shaping": "raw", "components": [{"type": "function", "path": "reward/r.py", "weight": 1.0}]}
VERL_SETTINGS = [s for s in hparams.SETTINGS if s.verl is not None and not s.app
                 and any(s.offered(k, "verl") for k in hparams.POLICY_KINDS)]


def _kind(key: str) -> str:
    return "grpo" if "grpo" in hparams.BY_KEY[key].kinds else "distill"


def _spec(key: str, text: str, extra: dict[str, Any]) -> dict[str, Any]:
    """The job spec the app would write for these form values (validated as the web app does)."""
    kind = _kind(key)
    preset = "qwen2.5-0.5b-1gpu"
    config, errors, _ = resolve_config(kind, preset, {**extra, key: text}, backend="verl",
                                       context={"has_reward": True, "has_teacher": True})
    assert errors == {}, errors
    spec = {"job_id": "5", "kind": kind, "backend": "verl", "model": {"path": "/models/m"},
            "reward": copy.deepcopy(REWARD), "hp": config["hp"], "verl": config["verl"]}
    if kind == "distill":
        spec["teacher"] = {"path": "/models/t"}
    return spec


@lru_cache(maxsize=1)
def _stock():
    from tests.training.backends.conftest import compose_verl

    return compose_verl([])


def _composed(cfg, path: str) -> Any:
    value = OmegaConf.select(cfg, path, throw_on_missing=False)
    return OmegaConf.to_container(value) if OmegaConf.is_config(value) else value


def test_every_verl_setting_has_a_case():
    assert sorted(s.key for s in VERL_SETTINGS) == sorted(CASES)
    # the four that used to be dropped on their way to VERL
    assert {"entropy_coeff", "grad_clip", "weight_decay", "warmup_steps"} <= set(CASES)


def test_settings_without_a_verl_key_are_not_offered_for_verl():
    for s in hparams.SETTINGS:
        if s.verl is None and not s.app:
            assert not any(s.offered(k, "verl") for k in hparams.KINDS), s.key
    _, errors, _ = resolve_config("distill", "qwen2.5-0.5b-1gpu", {"distill_alpha": "0.3"}, backend="verl")
    assert "not used by VERL" in errors["distill_alpha"]


@pytest.mark.parametrize("key", sorted(CASES))
def test_form_value_reaches_verls_composed_config(key, verl_compose):
    text, extra = CASES[key]
    setting = hparams.BY_KEY[key]
    value = hparams.coerce(setting, text)
    assert value != setting.default
    convert = CONVERSIONS.get(key, lambda v: v)
    paths = (READERS[key],) if key in READERS else setting.verl.paths
    cfg = verl_compose(build_overrides(_spec(key, text, extra), PATHS, 80, Resume("disable")))
    stock = _stock()
    for path in paths:
        assert _composed(cfg, path) == convert(value), (key, path)
        if _composed(stock, path) == convert(value):
            # VERL's default happens to be this value: our default, which differs, must reach VERL instead
            default = str(setting.default) if setting.default is not None else ""
            cfg = verl_compose(build_overrides(_spec(key, default, extra), PATHS, 80, Resume("disable")))
            assert _composed(stock, path) != convert(setting.default), (key, path)
            assert _composed(cfg, path) == convert(setting.default), (key, path)


@pytest.mark.parametrize("key,text,extra", [
    ("entropy_coeff", "0.001", {}), ("grad_clip", "0.5", {}), ("weight_decay", "0.05", {}), ("warmup_steps", "5", {}),
])
def test_the_four_once_dropped_settings_reach_verl(key, text, extra, verl_compose):
    cfg = verl_compose(build_overrides(_spec(key, text, extra), PATHS, 80, Resume("disable")))
    actor = cfg.actor_rollout_ref.actor
    got = {"entropy_coeff": actor.entropy_coeff, "grad_clip": actor.optim.clip_grad,
           "weight_decay": actor.optim.weight_decay, "warmup_steps": actor.optim.lr_warmup_steps}[key]
    assert got == hparams.coerce(hparams.BY_KEY[key], text)


def test_a_megatron_job_composes_against_verls_megatron_config():
    import os

    import verl
    from hydra import compose, initialize_config_dir

    overrides = build_overrides(_spec("verl.strategy", "megatron", {"weight_decay": 0.05, "grad_clip": 0.5}),
                                PATHS, 80, Resume("disable"))
    assert overrides[0] == "--config-name=ppo_megatron_trainer"
    with initialize_config_dir(config_dir=os.path.join(os.path.dirname(verl.__file__), "trainer", "config"),
                               version_base=None):
        cfg = compose(config_name=overrides[0].split("=", 1)[1], overrides=overrides[1:])
    actor = cfg.actor_rollout_ref.actor
    assert actor.strategy == "megatron" and cfg.actor_rollout_ref.ref.strategy == "megatron"
    assert "megatron" in actor and actor.optim.weight_decay == 0.05 and actor.optim.clip_grad == 0.5


def test_megatron_with_lora_is_refused_before_verl():
    from training.backends.base import BackendError

    spec = _spec("verl.strategy", "fsdp2", {})
    spec["verl"]["strategy"], spec["hp"]["lora"]["rank"] = "megatron", 8
    with pytest.raises(BackendError, match="Megatron"):
        build_overrides(spec, PATHS, 80, Resume("disable"))


def test_kl_coef_zero_means_no_kl_loss_and_no_reference_worker(verl_compose):
    """kl_coef 0 on VERL: use_kl_loss off, so VERL's own need_reference_policy builds no reference worker (the
    local trainer loads no reference model: tests/training/local/test_grpo_no_kl.py)."""
    from verl.trainer.ppo.utils import need_reference_policy

    for kl, wanted in (("0", False), ("0.02", True)):
        cfg = verl_compose(build_overrides(_spec("kl_coef", kl, {}), PATHS, 80, Resume("disable")))
        assert cfg.actor_rollout_ref.actor.use_kl_loss is wanted and not cfg.algorithm.use_kl_in_reward
        assert need_reference_policy(cfg) is wanted
        assert cfg.actor_rollout_ref.actor.kl_loss_coef == float(kl)
