"""Golden tests of the VERL override list, plus the batch/GPU/resume rules behind it.

The golden files were reviewed by hand against verl 0.9.1's ppo_trainer.yaml and examples;
regenerate with UPDATE_GOLDEN=1 only after re-reviewing the diff.
"""
from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest

from training.backends.base import BackendError
from training.backends.verl_overrides import VerlJob, build_overrides, hydra_value
from training.backends.verl_plan import BatchPlan, Resume, VerlPaths, decide_resume, plan_batches

GOLDEN = Path(__file__).parent / "golden"
RUN = Path("/runs/17")
PATHS = VerlPaths(run_dir=RUN, train_parquet=RUN / "data/train.parquet", val_parquet=RUN / "data/val.parquet",
                  reward_module=RUN / "verl/reward_fn.py", attempt=1)
HP = {"lr": 1e-6, "kl_coef": 0.02, "kl_loss_type": "low_var_kl", "batch_size": 64, "epochs": 3,
      "max_steps": None, "max_prompt_length": 512, "max_response_length": 1536, "max_seq_len": 2048,
      "group_size": 4, "temperature": 1.0, "clip_ratio": 0.2, "loss_agg_mode": "token-mean",
      "lora": {"rank": 0, "alpha": 16, "targets": "all-linear"}, "save_freq": 10, "test_freq": 5, "seed": 1}
# The demo job of docs/run-directory.md (tests/training/backends/conftest.py has the same one).
BASE = {"job_id": "17", "kind": "grpo", "backend": "verl", "model": {"path": "/models/tiny"},
        "data": {"train": "data/train.jsonl", "val": "data/val.jsonl"},
        "reward": {"shaping": "raw", "components": [
            {"type": "function", "path": "reward/exact_match.py", "name": "compute_score", "weight": 1.0}]},
        "hp": HP, "verl": {"rollout_engine": "vllm", "n_gpus_per_node": 1, "nnodes": 1, "use_v1": True}}
LOGGER_ENV = {"VERL_FILE_LOGGER_PATH": "/runs/17/attempts/1/metrics.jsonl", "WANDB_MODE": "disabled"}


def _spec(**updates):
    spec = copy.deepcopy(BASE)
    for key, value in updates.items():
        if isinstance(value, dict) and isinstance(spec.get(key), dict):
            spec[key].update(value)
        else:
            spec[key] = value
    return spec


def golden_cases() -> dict[str, tuple[dict, Resume, int]]:
    lora = _spec(hp={**HP, "lr": 1e-5, "lora": {"rank": 32, "alpha": 32, "targets": "q_proj,v_proj"}})
    model_reward = _spec(reward={"shaping": "normalized", "components": [
        {"type": "function", "path": "reward/exact_match.py", "name": "compute_score", "weight": 1.0},
        {"type": "model", "path": "/models/rm", "weight": 0.5}]})
    resume = _spec(resume_from="/runs/12/checkpoints/global_step_20")
    distill = _spec(kind="distill", teacher={"path": "/models/teacher"}, reward={"shaping": "raw", "components": []},
                    hp={**HP, "distill_mode": "on_policy", "kl_coef": 0.0},
                    verl={**BASE["verl"], "n_gpus_per_node": 4})
    return {
        "grpo": (_spec(), Resume("disable"), 80),
        "grpo_lora": (lora, Resume("disable"), 80),
        "model_reward": (model_reward, Resume("disable"), 80),
        "resume": (resume, decide_resume(resume["resume_from"], RUN, 1, None), 80),
        "distill": (distill, Resume("disable"), 80),
    }


@pytest.mark.parametrize("case", sorted(golden_cases()))
def test_overrides_match_golden(case):
    spec, resume, rows = golden_cases()[case]
    got = build_overrides(spec, PATHS, rows, resume, LOGGER_ENV)
    path = GOLDEN / f"{case}.txt"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text("\n".join(got) + "\n")
    expected = path.read_text().splitlines()
    assert got == expected, "\n".join(f"- {e}\n+ {g}" for e, g in zip(expected, got, strict=False) if e != g)


def test_every_override_is_unique_and_has_a_value():
    for spec, resume, rows in golden_cases().values():
        keys = [o.split("=", 1)[0] for o in build_overrides(spec, PATHS, rows, resume)]
        assert len(keys) == len(set(keys))


def test_it_never_enables_wandb_and_logs_to_file():
    spec, resume, rows = golden_cases()["grpo"]
    ov = build_overrides(spec, PATHS, rows, resume)
    assert "trainer.logger=[console,file]" in ov
    assert not any("wandb" in o.lower() for o in ov)


@pytest.mark.parametrize("gpus,group,batch,rows", [
    (1, 4, 64, 80), (8, 4, 64, 1000), (3, 4, 10, 10), (8, 5, 30, 30), (6, 4, 7, 100), (2, 1, 5, 5),
])
def test_batch_plan_satisfies_verl_divisibility(gpus, group, batch, rows):
    plan = plan_batches(batch, group, gpus, rows)
    assert 1 <= plan.train_batch_size <= min(batch, rows)
    assert (plan.train_batch_size * group) % gpus == 0  # validate_config: real_train_batch_size % n_gpus
    assert plan.ppo_mini_batch_size <= plan.train_batch_size  # ActorConfig.validate
    assert (plan.ppo_mini_batch_size * group) % gpus == 0  # engine_workers: mini_batch_size % dp
    assert plan.train_batch_size % plan.ppo_mini_batch_size == 0
    assert (plan.ppo_mini_batch_size * group // gpus) % plan.micro_batch_size_per_gpu == 0


def test_batch_size_is_capped_by_the_rows_so_an_epoch_has_a_step():
    assert plan_batches(64, 4, 1, 20) == BatchPlan(20, 20, 4, 4)


def test_it_explains_when_too_few_rows_for_the_gpus():
    with pytest.raises(BackendError, match="at least 8 training prompts"):
        plan_batches(64, 1, 8, 5)


def test_distillation_refuses_a_single_gpu():
    spec = _spec(kind="distill", teacher={"path": "/models/teacher"},
                 hp={**HP, "distill_mode": "on_policy"})
    with pytest.raises(BackendError, match="student pool and a teacher pool") as exc:
        VerlJob.from_spec(spec)
    assert exc.value.permanent


def test_distillation_splits_gpus_between_student_and_teacher():
    spec = _spec(kind="distill", teacher={"path": "/t"}, hp={**HP, "distill_mode": "on_policy"},
                 verl={**BASE["verl"], "n_gpus_per_node": 8, "teacher_gpus_per_node": 2})
    plan = VerlJob.from_spec(spec).gpus
    assert (plan.n_gpus_per_node, plan.teacher_gpus_per_node) == (6, 2)


@pytest.mark.parametrize("updates,message", [
    ({"kind": "reward_model"}, "local backend"),
    ({"kind": "distill", "teacher": {"path": "/t"}}, "on-policy"),
    ({"verl": {"rollout_engine": "trtllm"}}, "rollout_engine"),
    ({"verl": {"n_gpus_per_node": 2, "tensor_model_parallel_size": 3}}, "must divide"),
    ({"hp": {**HP, "group_size": 1}}, "group_size >= 2"),
    ({"hp": {**HP, "lora": {"rank": 1024}}}, "maximum LoRA rank"),
    ({"reward": {"components": [{"type": "model", "path": "/a"}, {"type": "model", "path": "/b"}]}},
     "one reward model"),
])
def test_it_rejects_specs_verl_cannot_run(updates, message):
    with pytest.raises(BackendError, match=message):
        build_overrides(_spec(**updates), PATHS, 80, Resume("disable"))


def test_resume_rules():
    own = "/runs/17/checkpoints/global_step_30"
    parent = "/runs/12/checkpoints/global_step_20/"
    assert decide_resume(None, RUN, 1, None) == Resume("disable")
    assert decide_resume(None, RUN, 2, None) == Resume("auto")
    # a branch starts from the parent's folder itself (no trailing slash: VERL parses the step from it)
    assert decide_resume(parent, RUN, 1, None) == Resume("resume_path", parent.rstrip("/"))
    # ...and a restart of the branch continues from its own checkpoints
    assert decide_resume(parent, RUN, 2, 25) == Resume("auto")
    # an explicit restore inside the run (KL guard) always loads that step
    assert decide_resume(own, RUN, 3, 40) == Resume("resume_path", own)


@pytest.mark.parametrize("bad", ["relative/global_step_3", "/runs/12/checkpoints/global_step_3/actor"])
def test_resume_from_must_be_an_absolute_global_step_folder(bad):
    with pytest.raises(BackendError):
        decide_resume(bad, RUN, 1, None)


@pytest.mark.parametrize("value,expected", [
    (True, "True"), (None, "null"), (1e-6, "1e-06"), (3, "3"), (["a", "b"], "[a,b]"),
    ("/a/b-c.d", "/a/b-c.d"), ("/a b/c", "'/a b/c'"), ("it's", "'it\\'s'"), ("x,y", "'x,y'"),
])
def test_hydra_value_quoting(value, expected):
    assert hydra_value(value) == expected


def test_hydra_value_quoting_round_trips_through_hydras_parser():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for text in ["/a b/c", "it's", "x,y", "a=b", "[x]", "/p/global_step_3"]:
        assert parser.parse_override(f"trainer.x={hydra_value(text)}").value() == text


@pytest.mark.parametrize("bad", ["a\\b", "${oc.env:HOME}", "a\nb"])
def test_hydra_value_refuses_interpolations_and_escapes(bad):
    with pytest.raises(BackendError):
        hydra_value(bad)
