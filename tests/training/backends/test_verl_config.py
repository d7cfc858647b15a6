"""Our overrides against the installed verl 0.9.1: Hydra composition, validation, dataclasses, dataset.

Mocked, because it needs a GPU stack: `verl.workers.rollout.vllm_rollout.utils` (it imports vLLM),
which validate_config imports only for LoRA + vLLM to round the LoRA rank. The stand-in keeps
verl's own fallback list of ranks. Everything else is verl's real code on CPU.
"""
from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path

import pytest

pytest.importorskip("verl")

from training.backends.verl import VerlBackend  # noqa: E402
from training.models import build_tiny_reward_model  # noqa: E402

VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # verl's fallback when vllm is absent


@pytest.fixture
def no_vllm(monkeypatch):
    fake = types.ModuleType("verl.workers.rollout.vllm_rollout.utils")

    def get_vllm_max_lora_rank(lora_rank: int) -> int:
        for rank in VLLM_LORA_RANKS:
            if lora_rank <= rank:
                return rank
        raise ValueError(f"lora_rank must be less than or equal to {VLLM_LORA_RANKS[-1]}")

    fake.get_vllm_max_lora_rank = get_vllm_max_lora_rank
    monkeypatch.setitem(sys.modules, "verl.workers.rollout.vllm_rollout.utils", fake)


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-datasets"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def validate(cfg) -> None:
    """verl's driver-side checks (main_ppo.main) plus the dataclass conversions its workers do."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    from verl.utils.device import auto_set_device

    auto_set_device(cfg)
    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    omega_conf_to_dataclass(cfg.algorithm)
    omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
    omega_conf_to_dataclass(cfg.actor_rollout_ref.actor.checkpoint)
    model = omega_conf_to_dataclass(cfg.actor_rollout_ref.model)  # loads the tiny model's config + tokenizer
    assert model.architectures == ["Qwen2ForCausalLM"]
    if cfg.reward.reward_model.enable:
        omega_conf_to_dataclass(cfg.reward.reward_model)
    if cfg.distillation.enabled:
        distill = omega_conf_to_dataclass(cfg.distillation)  # checks the teacher fills its GPU pool
        assert sum(t.world_size for t in distill.teacher_models.values()) == \
            cfg.distillation.n_gpus_per_node * cfg.distillation.nnodes


def _argv_overrides(plan) -> list[str]:
    assert plan.argv[1:3] == ["-m", "verl.trainer.main_ppo"]
    return plan.argv[3:]


def test_grpo_job_composes_and_validates(verl_compose, make_run, no_vllm, hf_cache):
    spec, run_dir = make_run()
    cfg = verl_compose(_argv_overrides(VerlBackend().prepare(run_dir, 1)))
    validate(cfg)
    assert cfg.algorithm.adv_estimator == "grpo"
    assert cfg.actor_rollout_ref.actor.use_kl_loss and cfg.actor_rollout_ref.actor.kl_loss_type == "low_var_kl"
    assert list(cfg.trainer.logger) == ["console", "file"]
    assert cfg.trainer.default_local_dir == str(run_dir / "checkpoints")
    assert str(run_dir / "attempts" / "1" / "metrics.jsonl") == \
        cfg.ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH


def test_lora_job_composes_and_validates(verl_compose, make_run, no_vllm, hf_cache, base_spec):
    hp = {**base_spec["hp"], "lr": 1e-5, "lora": {"rank": 16, "alpha": 32, "targets": "q_proj,v_proj"}}
    spec, run_dir = make_run({"hp": hp})
    cfg = verl_compose(_argv_overrides(VerlBackend().prepare(run_dir, 1)))
    validate(cfg)
    assert cfg.actor_rollout_ref.model.lora_rank == 16
    assert list(cfg.actor_rollout_ref.model.target_modules) == ["q_proj", "v_proj"]


def test_model_reward_job_composes_and_validates(verl_compose, make_run, no_vllm, hf_cache, tmp_path):
    rm = build_tiny_reward_model(tmp_path / "rm", hidden=32, layers=1)
    reward = {"shaping": "normalized", "components": [
        {"type": "function", "path": "reward/exact_match.py", "weight": 1.0},
        {"type": "model", "path": str(rm), "weight": 0.5}]}
    spec, run_dir = make_run({"reward": reward})
    cfg = verl_compose(_argv_overrides(VerlBackend().prepare(run_dir, 1)))
    validate(cfg)
    assert cfg.reward.reward_model.enable and cfg.reward.reward_model.model_path == str(rm)


def test_resumed_job_composes_and_validates(verl_compose, make_run, no_vllm, hf_cache, tmp_path):
    parent = tmp_path / "parent" / "checkpoints" / "global_step_20"
    (parent / "actor").mkdir(parents=True)
    spec, run_dir = make_run({"resume_from": str(parent)})
    cfg = verl_compose(_argv_overrides(VerlBackend().prepare(run_dir, 1)))
    validate(cfg)
    assert cfg.trainer.resume_mode == "resume_path"
    # verl parses the step exactly like this (ray_trainer._load_checkpoint)
    assert int(cfg.trainer.resume_from_path.split("global_step_")[-1]) == 20


def test_distillation_job_composes_and_validates(verl_compose, make_run, no_vllm, hf_cache, base_spec, tiny_model_dir):
    spec, run_dir = make_run({"kind": "distill", "teacher": {"path": str(tiny_model_dir)},
                              "reward": {"shaping": "raw", "components": []},
                              "hp": {**base_spec["hp"], "distill_mode": "on_policy"},
                              "verl": {**base_spec["verl"], "n_gpus_per_node": 4}})
    cfg = verl_compose(_argv_overrides(VerlBackend().prepare(run_dir, 1)))
    validate(cfg)
    assert cfg.trainer.n_gpus_per_node + cfg.distillation.n_gpus_per_node == 4


@pytest.mark.parametrize("gpus,nnodes,group,batch", [(8, 1, 4, 64), (3, 1, 4, 10), (2, 2, 5, 30)])
def test_batch_plans_pass_verl_validation_for_other_gpu_counts(verl_compose, make_run, no_vllm, hf_cache, base_spec,
                                                                gpus, nnodes, group, batch, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "http://head:8265")  # multi-node is a ray job submission
    spec, run_dir = make_run({"hp": {**base_spec["hp"], "group_size": group, "batch_size": batch},
                              "verl": {**base_spec["verl"], "n_gpus_per_node": gpus, "nnodes": nnodes}})
    plan = VerlBackend().prepare(run_dir, 1)
    cfg = verl_compose(plan.argv[plan.argv.index("--") + 4:])  # with RAY_ADDRESS set, every job is a ray job
    validate(cfg)
    dp = gpus * nnodes
    mini = cfg.actor_rollout_ref.actor.ppo_mini_batch_size * group
    assert mini % dp == 0  # the worker-side check in verl/workers/engine_workers.py


def test_unknown_key_is_rejected_by_verl_hydra(verl_compose):
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException):
        verl_compose(["trainer.no_such_key=1"])


def test_parquet_loads_through_verls_rl_dataset(verl_compose, make_run, hf_cache):
    from verl.trainer.ppo.utils import create_rl_dataset
    from verl.utils.config import omega_conf_to_dataclass

    spec, run_dir = make_run()
    cfg = verl_compose(_argv_overrides(VerlBackend().prepare(run_dir, 1)))
    model = omega_conf_to_dataclass(cfg.actor_rollout_ref.model)
    ds = create_rl_dataset(cfg.data.train_files, cfg.data, model.tokenizer, model.processor, is_train=True)
    assert len(ds) == 80  # no prompt was dropped by filter_overlong_prompts (it templates every prompt)
    item = ds[3]
    rows = [json.loads(line) for line in (run_dir / "data" / "train.jsonl").read_text().splitlines()]
    assert item["raw_prompt"] == [{"role": "user", "content": rows[3]["prompt"]}]
    assert item["reward_model"] == {"style": "rule", "ground_truth": rows[3]["ground_truth"]}
    assert item["index"] == 3 and item["extra_info"]["split"] == "train"
    assert item["extra_info"]["a"] == rows[3]["extra_info"]["a"]


def test_prepared_reward_module_is_what_verl_loads(verl_compose, make_run):
    spec, run_dir = make_run()
    ov = _argv_overrides(VerlBackend().prepare(run_dir, 1))
    cfg = verl_compose(ov)
    assert Path(cfg.reward.custom_reward_function.path).is_file()
    assert cfg.reward.custom_reward_function.name == "compute_score"


@pytest.mark.slow  # starts `python -m verl.trainer.main_ppo` (~6 s of CPU for its imports)
def test_the_exact_argv_parses_through_main_ppos_own_cli(make_run, tmp_path):
    """The real `python -m verl.trainer.main_ppo ARGV --cfg job` (Hydra prints the config and exits),
    with a run directory whose path needs quoting."""
    import subprocess

    import yaml

    spec, run_dir = make_run(name="it's a run")
    plan = VerlBackend().prepare(run_dir, 1)
    proc = subprocess.run([*plan.argv, "--cfg", "job"], cwd=plan.cwd, env={**os.environ, **plan.env},
                          capture_output=True, text=True, timeout=600)  # a hang guard only
    assert proc.returncode == 0, proc.stderr[-2000:]
    cfg = yaml.safe_load(proc.stdout[proc.stdout.index("model_engine:"):])
    assert cfg["data"]["train_files"] == str(run_dir.resolve() / "data" / "train.parquet")
    assert cfg["trainer"]["default_local_dir"] == str(run_dir.resolve() / "checkpoints")
    assert cfg["reward"]["custom_reward_function"]["path"] == str(run_dir.resolve() / "verl" / "reward_fn.py")
    assert cfg["trainer"]["use_v1"] is True and cfg["actor_rollout_ref"]["rollout"]["n"] == 4
