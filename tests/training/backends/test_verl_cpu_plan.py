"""The CPU rehearsal's launch plan: VERL's own Hydra config takes every override, the plan names a
private Ray cluster, and what the CPU rollout cannot do is refused before anything starts."""
from __future__ import annotations

import json
import shutil

import pytest

pytest.importorskip("verl")

from training.backends.base import BackendError  # noqa: E402
from training.backends.verl import VerlBackend  # noqa: E402
from training.backends.verl_overrides import merge_overrides  # noqa: E402
from training.verl_cpu import PLAIN_CHAT_TEMPLATE, PLUGIN_MODULE, V1_ENV, ray_temp_dir  # noqa: E402

CPU = {"hp": {"device": "cpu"}}


def _overrides(plan) -> list[str]:
    assert plan.argv[1:3] == ["-m", "verl.trainer.main_ppo"]
    return plan.argv[3:]


def test_cpu_plan_composes_with_verls_config(verl_compose, make_run):
    spec, run_dir = make_run(CPU)
    plan = VerlBackend().prepare(run_dir, 1)
    cfg = verl_compose(_overrides(plan))
    rollout, actor = cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.actor
    assert rollout.name == "hf" and rollout.checkpoint_engine.backend == "naive"
    assert actor.strategy == "fsdp2" and actor.use_torch_compile is False
    assert cfg.actor_rollout_ref.model.use_remove_padding is False
    assert cfg.trainer.device == "cpu" and cfg.trainer.use_v1 is True and cfg.trainer.n_gpus_per_node == 1
    assert_float32_without_recompute(cfg)
    ray_init = cfg.ray_kwargs.ray_init
    assert ray_init.address == "local" and ray_init.num_gpus == 1 and ray_init.include_dashboard is False
    assert ray_init._temp_dir == ray_temp_dir(run_dir, 1) == plan.scratch_dirs[0]
    assert plan.env["VERL_USE_EXTERNAL_MODULES"] == PLUGIN_MODULE and plan.env["VERL_PLATFORM"] == "cpu"
    assert plan.env["RAY_ADDRESS"] == ""  # a cluster named by the worker's environment is never joined
    assert plan.env["GLOO_SOCKET_IFNAME"] == "lo"
    assert plan.env["WORKBENCH_C10D_STORE_DIR"].startswith(ray_init._temp_dir)  # ranks meet without a socket
    assert json.loads(json.dumps(plan.to_json()))["scratch_dirs"] == plan.scratch_dirs


def assert_float32_without_recompute(cfg) -> None:
    """The trainer computes as the local backend does: float32 (VERL's FSDP engine autocasts to bf16 unless
    mixed_precision says otherwise), activations kept (no gradient checkpointing)."""
    import torch
    from verl.utils.torch_dtypes import PrecisionType

    for role in ("actor", "ref"):
        mixed = getattr(cfg.actor_rollout_ref, role).fsdp_config.mixed_precision
        for part in ("param", "reduce", "buffer"):
            assert PrecisionType.to_dtype(mixed.get(f"{part}_dtype", "bf16")) == torch.float32, (role, part)
    assert cfg.actor_rollout_ref.model.enable_gradient_checkpointing is False


def test_each_attempt_gets_its_own_short_ray_dir(tmp_path):
    a1, a2 = ray_temp_dir(tmp_path / "run", 1), ray_temp_dir(tmp_path / "run", 2)
    other = ray_temp_dir(tmp_path / "other", 1)
    assert len({a1, a2, other}) == 3
    # Ray's socket paths (<temp>/session_<date>_<pid>/sockets/plasma_store) must stay under ~107 chars.
    assert all(len(p) <= 40 for p in (a1, a2, other))


def test_a_tokenizer_without_chat_template_gets_the_plain_one(verl_compose, make_run, tmp_path, tiny_model_dir):
    plain = tmp_path / "plain-model"
    shutil.copytree(tiny_model_dir, plain)
    cfg_file = plain / "tokenizer_config.json"
    tok_cfg = json.loads(cfg_file.read_text())
    tok_cfg.pop("chat_template", None)
    cfg_file.write_text(json.dumps(tok_cfg))
    (plain / "chat_template.jinja").unlink(missing_ok=True)
    spec, run_dir = make_run({**CPU, "model": {"path": str(plain), "name": "plain"}})
    cfg = verl_compose(_overrides(VerlBackend().prepare(run_dir, 1)))
    assert cfg.actor_rollout_ref.model.custom_chat_template == PLAIN_CHAT_TEMPLATE
    spec, run_dir = make_run(CPU, name="templated")
    cfg = verl_compose(_overrides(VerlBackend().prepare(run_dir, 1)))
    assert cfg.actor_rollout_ref.model.custom_chat_template is None


@pytest.mark.parametrize("updates, words", [
    ({"hp": {"device": "cpu", "lora": {"rank": 8}}}, "LoRA is not available on the CPU rollout"),
    ({"hp": {"device": "cpu"}, "model": {"path": "Qwen/Qwen2.5-0.5B-Instruct"}}, "local model folder"),
    ({"hp": {"device": "cpu"}, "verl": {"nnodes": 2}}, "RAY_ADDRESS"),
])
def test_what_the_cpu_rollout_cannot_do_is_refused(make_run, updates, words, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    spec, run_dir = make_run(updates)
    with pytest.raises(BackendError, match=words):
        VerlBackend().prepare(run_dir, 1)


def test_gpu_plans_are_unchanged(make_run):
    spec, run_dir = make_run({"hp": {"device": "cuda"}})
    plan = VerlBackend().prepare(run_dir, 1)
    assert "actor_rollout_ref.rollout.name=vllm" in plan.argv and not plan.scratch_dirs
    assert "VERL_USE_EXTERNAL_MODULES" not in plan.env


def test_a_cpu_job_on_a_ray_cluster_is_submitted_without_a_private_cluster(verl_compose, make_run, monkeypatch):
    from tests.training.backends.test_verl_config import validate

    monkeypatch.setenv("RAY_ADDRESS", "http://127.0.0.1:8265")
    spec, run_dir = make_run({**CPU, "hp": {"device": "cpu", "batch_size": 4, "group_size": 2},
                              "verl": {"nnodes": 2}})
    plan = VerlBackend().prepare(run_dir, 1)
    assert plan.argv[1:5] == ["job", "submit", "--address", "http://127.0.0.1:8265"] and not plan.scratch_dirs
    sep = plan.argv.index("--")
    cfg = verl_compose(plan.argv[sep + 4:])
    assert (cfg.trainer.nnodes, cfg.trainer.n_gpus_per_node, cfg.trainer.device) == (2, 1, "cpu")
    validate(cfg)
    assert cfg.actor_rollout_ref.rollout.name == "hf"
    assert "address" not in cfg.ray_kwargs.ray_init and cfg.ray_kwargs.ray_init.num_cpus is None
    job_env = json.loads(plan.argv[plan.argv.index("--runtime-env-json") + 1])["env_vars"]
    assert job_env["VERL_USE_EXTERNAL_MODULES"] == PLUGIN_MODULE and job_env["VERL_PLATFORM"] == "cpu"
    assert "RAY_ADDRESS" not in job_env and "WORKBENCH_C10D_STORE_DIR" not in job_env
    assert plan.env["RAY_ADDRESS"] == "http://127.0.0.1:8265"
    assert plan.ray_job["address"] == "http://127.0.0.1:8265" and plan.cancel_argv[1:3] == ["job", "stop"]


def test_merge_overrides_replaces_in_place_and_appends():
    merged = merge_overrides([("a", 1), ("b", 2)], [("b", 3), ("c", 4)])
    assert merged == [("a", 1), ("b", 3), ("c", 4)]


def test_on_policy_distillation_on_cpu_gives_the_teacher_its_own_faked_gpu(verl_compose, make_run, tiny_model_dir):
    from tests.training.backends.test_verl_config import validate

    distill = {"kind": "distill", "teacher": {"path": str(tiny_model_dir)},
               "hp": {"device": "cpu", "distill_mode": "on_policy", "distill_loss": "k3"}}
    spec, run_dir = make_run(distill)
    cfg = verl_compose(_overrides(VerlBackend().prepare(run_dir, 1)))
    validate(cfg)  # includes the teacher filling its pool
    assert cfg.ray_kwargs.ray_init.num_gpus == 2 and cfg.trainer.n_gpus_per_node == 1
    assert cfg.distillation.n_gpus_per_node == 1
    assert cfg.distillation.teacher_models.teacher_model.inference.name == "hf"
    spec, run_dir = make_run({**distill, "hp": {**distill["hp"], "distill_loss": "forward_kl_topk"}}, name="topk")
    with pytest.raises(BackendError, match="vLLM or SGLang"):
        VerlBackend().prepare(run_dir, 1)


def test_the_v1_trainer_is_the_default_on_cpu_with_one_storage_unit_and_legacy_a_choice(verl_compose, make_run):
    from training.hparams import defaults

    assert defaults("verl")["use_v1"] is True  # what the form and every preset start from
    spec, run_dir = make_run(CPU)
    plan = VerlBackend().prepare(run_dir, 1)
    cfg = verl_compose(_overrides(plan))
    assert cfg.trainer.use_v1 is True and cfg.trainer.device == "cpu"
    assert plan.env[V1_ENV] == "1"  # the plugin patches V1's rollout dump in every Ray process
    # TransferQueue's default 8 storage actors (1 CPU each) would outgrow the private cluster's 8 slots
    assert cfg.transfer_queue.backend.SimpleStorage.num_data_storage_units == 1
    assert cfg.ray_kwargs.ray_init.num_cpus == 8

    spec, run_dir = make_run({**CPU, "verl": {"use_v1": False}}, name="legacy")
    plan = VerlBackend().prepare(run_dir, 1)
    cfg = verl_compose(_overrides(plan))
    assert cfg.trainer.use_v1 is False and V1_ENV not in plan.env
    assert "transfer_queue.backend.SimpleStorage.num_data_storage_units=1" not in _overrides(plan)


def test_v1_rollout_dumps_get_group_uids_and_reward_columns():
    from training.verl_cpu.v1_dump import merge_extras

    out = merge_extras({"uid": ["p1_0_0", "p1_1_0"]}, ["p1", "p1"],
                       [{"r/near": 0.5, "err/near": None}, {"r/near": 0.25}])
    assert out == {"uid": ["p1", "p1"], "r/near": [0.5, 0.25], "err/near": [None, None]}
