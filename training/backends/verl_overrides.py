"""The VERL job view: the job spec read once, and the Hydra override list for `python -m verl.trainer.main_ppo`
(verl 0.9.1) planned from it.

`VerlJob.from_spec` reads job.json's plain form once: every setting's value and its VERL pairs in one pass of
`training.hparams` (where each hyperparameter goes is declared there, `Setting.verl`), the flags the backend
decides by (CPU rehearsal, on-policy distillation, Ray cluster, V1 trainer, Megatron), the GPU split, and
refuses what VERL cannot run. The backend passes the view on: `VerlJob.plan` adds what the run needs besides
the settings (paths, reward, logger, resume) and the values several settings decide together (batch sizes over
the GPUs, the teacher's GPU pool; `training.backends.verl_plan`). Every key exists in verl's own
`ppo_trainer.yaml`; tests compose the list against the installed package with Hydra and run verl's
`validate_config`, so a renamed key fails CI instead of a GPU run. Nothing here touches the file system.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import Any

from training import hparams
from training.backends.base import BackendError
from training.backends.verl_plan import GpuPlan, Resume, VerlPaths, plan_batches, plan_epochs
from training.verl_cpu import ROLLOUT_NAME, cpu_overrides

ENGINES = hparams.ROLLOUT_ENGINES
MAX_LORA_RANK = hparams.MAX_LORA_RANK
DISTILL_LOSS_MODES = hparams.BY_KEY["distill_loss"].choices
MEGATRON_CONFIG = "ppo_megatron_trainer"
# VERL's registered reward manager that calls our compute_score once per sample (verl/workers/reward_manager).
REWARD_MANAGER = "naive"
TOPK_LOSS_MODES = ("forward_kl_topk",)
# VERL's teacher config accepts top-k log-probs only from vLLM or SGLang (DistillationTeacherModelConfig).
CPU_TOPK_MESSAGE = ("the top-k forward KL needs the teacher's top-k log-probs, which VERL only takes from vLLM "
                    "or SGLang (GPU): on CPU choose a per-token loss (k3, low_var_kl, k2, mse or abs)")
_SAFE_VALUE = re.compile(r"[A-Za-z0-9_\-./:@+]+")
Pairs = list[tuple[str, Any]]


@dataclass(frozen=True)
class RewardView:
    """What VERL's reward workers need of the job (training.backends.verl_reward's config): no hyperparameter
    but the scoring budget."""

    job_id: str
    shaping: str
    components: tuple[dict[str, Any], ...]
    sandbox: dict[str, Any]
    engine: str  # the engine that serves a reward model
    workers: int | None  # hp.reward_workers: the CPU budget for reward code
    loop_workers: int  # VERL's reward-loop workers (reward.num_workers)

    @property
    def model_components(self) -> list[dict[str, Any]]:
        return [c for c in self.components if c.get("type") == "model"]


@dataclass(frozen=True)
class VerlJob:
    """A VERL job spec read once: the flags, the settings and the GPU split the backend plans from."""

    job_id: str
    model: str
    teacher: str | None
    resume_from: str | None
    data: dict[str, str]  # split -> path inside the run dir
    values: dict[str, Any]  # every setting's value by key (its default when the spec has none)
    # the settings VERL takes for this kind: (setting, value, the (Hydra path, value) pairs it adds; none if planned)
    settings: tuple[tuple[hparams.Setting, Any, Pairs], ...]
    reward: RewardView
    cpu: bool  # the CPU rehearsal (training.verl_cpu)
    distill: bool  # on-policy distillation (a teacher pool)
    use_v1: bool  # VERL's V1 trainer (trainer.use_v1)
    ray_address: str | None  # an existing Ray cluster the job is submitted to; None: this worker
    gpus: GpuPlan
    engine: str  # the rollout engine
    micro_batch_size: int | None = None
    mini_batch_size: int | None = None

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> VerlJob:
        """Read `spec` (job.json's plain form) once; a BackendError names what VERL cannot run."""
        kind = spec.get("kind", "grpo")
        _check_kind(spec, kind)
        try:
            values, table = hparams.verl_settings(spec)
        except ValueError as exc:
            raise BackendError(str(exc)) from None
        hp, verl = spec.get("hp") or {}, spec.get("verl") or {}
        model = (spec.get("model") or {}).get("path")
        if not model:
            raise BackendError("model.path is required")
        distill = kind == "distill"
        cpu = values["device"] == "cpu" or verl.get("rollout_engine") == ROLLOUT_NAME
        reward = spec.get("reward") or {}
        components = tuple(reward.get("components") or [])
        if cpu:
            _check_cpu_job(model, values["lora.rank"], components)
        engine = ROLLOUT_NAME if cpu else values["verl.rollout_engine"]
        if engine not in ENGINES:
            raise BackendError(f"verl.rollout_engine must be one of {', '.join(ENGINES)}, got {engine!r}")
        gpus = _gpu_plan(verl, cpu, distill)
        tp = int(values["verl.tensor_model_parallel_size"])
        if tp < 1 or gpus.n_gpus_per_node % tp:
            raise BackendError(f"tensor_model_parallel_size={tp} must divide the {gpus.n_gpus_per_node} "
                               "student GPU(s) per node")
        if not distill and int(values["group_size"]) < 2:
            raise BackendError("GRPO needs hp.group_size >= 2 (it compares samples of the same prompt)")
        loop = int(verl.get("reward_workers", 4))
        budget = values["reward_workers"]
        return cls(
            job_id=str(spec.get("job_id", "")), model=model, teacher=(spec.get("teacher") or {}).get("path"),
            resume_from=spec.get("resume_from") or None, data=dict(spec.get("data") or {}), values=values,
            settings=table,
            reward=RewardView(job_id=str(spec.get("job_id", "")), shaping=reward.get("shaping", "raw"),
                              components=components, sandbox=spec.get("sandbox") or {},
                              engine=verl.get("rollout_engine", "vllm"), workers=budget,
                              loop_workers=max(1, min(loop, int(budget))) if budget is not None else loop),
            cpu=cpu, distill=distill, use_v1=bool(values["verl.use_v1"]),
            ray_address=verl.get("ray_address") or os.environ.get("RAY_ADDRESS") or None,
            gpus=gpus, engine=engine,
            micro_batch_size=hp.get("micro_batch_size"), mini_batch_size=hp.get("mini_batch_size"))

    @property
    def config_name(self) -> str:
        """VERL's top-level config the job composes (main_ppo's default, or Megatron's)."""
        return MEGATRON_CONFIG if self.values["verl.strategy"] == "megatron" else "ppo_trainer"

    def plan(self, paths: VerlPaths, n_train_rows: int, resume: Resume, logger_env: dict[str, str] | None = None,
             chat_template: str | None = None) -> tuple[list[str], Pairs]:
        """The rendered override list and the (Hydra path, value) pairs it renders.

        `chat_template` is passed for a model whose tokenizer has none (VERL's rollout always applies one).
        A job on an existing Ray cluster (`ray_address`) starts no private one on CPU.
        A Megatron job's list starts with `--config-name=ppo_megatron_trainer` (VERL's Megatron config).
        """
        pairs = self.pairs(paths, n_train_rows, resume, logger_env, chat_template)
        out = [f"{k}={hydra_value(v)}" for k, v in pairs]
        if self.config_name == MEGATRON_CONFIG:
            # Megatron workers have their own config tree; every key set above exists in it too.
            out.insert(0, f"--config-name={MEGATRON_CONFIG}")
        return out, pairs

    def pairs(self, paths: VerlPaths, n_train_rows: int, resume: Resume, logger_env: dict[str, str] | None = None,
              chat_template: str | None = None) -> Pairs:
        """The planned (Hydra path, value) pairs that `plan` renders."""
        v, gpus = self.values, self.gpus
        has_task_reward = bool(self.reward.components)
        # Distillation without a task reward learns from the teacher alone: one sample per prompt.
        group = int(v["group_size"]) if (not self.distill or has_task_reward) else 1
        batches = plan_batches(int(v["batch_size"]), group, gpus.student_gpus, n_train_rows,
                               self.mini_batch_size, self.micro_batch_size)  # micro: per GPU on VERL
        ov: Pairs = [
            ("algorithm.adv_estimator", "grpo"),
            ("algorithm.use_kl_in_reward", False),
            ("critic.enable", False),  # GRPO has no value model (verl would only warn and infer it)
            ("data.train_files", str(paths.train_parquet)),
            ("data.val_files", str(paths.val_parquet)),
            ("data.train_batch_size", batches.train_batch_size),
            ("trainer.total_epochs", plan_epochs(v["epochs"], v["max_steps"])),
            ("data.filter_overlong_prompts", True),
            ("data.truncation", "error"),
            ("actor_rollout_ref.model.path", self.model),
            ("actor_rollout_ref.actor.ppo_mini_batch_size", batches.ppo_mini_batch_size),
            ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", batches.micro_batch_size_per_gpu),
            ("actor_rollout_ref.rollout.n", group),
            ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", batches.log_prob_micro_batch_size_per_gpu),
            ("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", batches.log_prob_micro_batch_size_per_gpu),
        ]
        for _setting, _value, setting_pairs in self.settings:
            ov += setting_pairs
        if chat_template is not None:  # the model's tokenizer has none: render prompts as plain text
            ov.append(("actor_rollout_ref.model.custom_chat_template", chat_template))
        ov += _reward_overrides(self.reward, paths.reward_module, self.engine)
        ov += [("reward.reward_manager.source", "register"), ("reward.reward_manager.name", REWARD_MANAGER),
               ("reward.num_workers", self.reward.loop_workers)]
        if self.distill:
            ov += self._distill_overrides(has_task_reward)
        ov += [
            ("trainer.logger", ["console", "file"]),
            ("trainer.project_name", "rlhf-workbench"),
            ("trainer.experiment_name", f"job-{self.job_id or 'unknown'}"),
            ("trainer.default_local_dir", str(paths.checkpoints)),
            ("trainer.rollout_data_dir", str(paths.samples_dir("rollout"))),
            ("trainer.validation_data_dir", str(paths.samples_dir("val"))),
            ("trainer.n_gpus_per_node", gpus.n_gpus_per_node),
            ("trainer.nnodes", gpus.nnodes),
            ("trainer.val_before_train", True),
            ("trainer.resume_mode", resume.mode),
        ]
        if resume.path:
            ov.append(("trainer.resume_from_path", resume.path))
        # trainer.use_v1 (a setting, default True): V1 imports `transfer_queue`, which verl declares only in
        # an extra (verl issue #7320); the lock pins it, and prepare refuses V1 where it is missing.
        ov.append(("hydra.run.dir", str(paths.hydra_dir)))
        for key, value in (logger_env or {}).items():
            # The Tracking object lives in a Ray actor; an attached cluster does not inherit our env.
            ov.append((f"+ray_kwargs.ray_init.runtime_env.env_vars.{key}", value))
        if self.cpu:
            private_ray = None if self.ray_address else paths.ray_tmp
            ov = merge_overrides(ov, cpu_overrides(private_ray, gpus.student_gpus + gpus.teacher_gpus_per_node,
                                                   self.use_v1))
        return ov

    def _distill_overrides(self, has_task_reward: bool) -> Pairs:
        if not self.teacher:
            raise BackendError("on-policy distillation needs teacher.path")
        mode = self.values["distill_loss"]
        if mode not in DISTILL_LOSS_MODES:
            raise BackendError(f"hp.distill_loss must be one of {', '.join(DISTILL_LOSS_MODES)}, got {mode!r}")
        if self.cpu and mode in TOPK_LOSS_MODES:
            raise BackendError(CPU_TOPK_MESSAGE)
        return [
            ("actor_rollout_ref.actor.use_kl_loss", False),  # the teacher replaces the reference policy
            ("distillation.enabled", True),
            ("distillation.n_gpus_per_node", self.gpus.teacher_gpus_per_node),
            ("distillation.nnodes", self.gpus.nnodes),
            ("distillation.teacher_models.teacher_model.model_path", self.teacher),
            ("distillation.teacher_models.teacher_model.inference.tensor_model_parallel_size", 1),
            # The teacher owns its GPUs, so its engine may take most of their memory.
            ("distillation.teacher_models.teacher_model.inference.gpu_memory_utilization", 0.8),
            ("distillation.distillation_loss.use_task_rewards", has_task_reward),
        ]


def _check_kind(spec: dict[str, Any], kind: str) -> None:
    if kind == "reward_model":
        raise BackendError("reward-model training is not a VERL job: run it on the local backend")
    if kind == "distill" and (spec.get("hp") or {}).get("distill_mode") != "on_policy":
        raise BackendError("VERL only does on-policy distillation (hp.distill_mode=on_policy); "
                           "run offline distillation on the local backend")
    if kind not in ("grpo", "distill"):
        raise BackendError(f"unknown job kind {kind!r}")


def _check_cpu_job(model: str, lora_rank: Any, components: tuple[dict[str, Any], ...]) -> None:
    """What the CPU rehearsal cannot do, said before anything starts."""
    if not os.path.isabs(model):
        raise BackendError(f"a VERL job on CPU needs a local model folder (the worker is offline), got {model!r}")
    if int(lora_rank or 0) > 0:
        raise BackendError("LoRA is not available on the CPU rollout (it syncs full weights only): "
                           "set the LoRA rank to 0 for the CPU rehearsal")
    if any(c.get("type") == "model" for c in components):
        raise BackendError("a reward model is served by vLLM/SGLang in VERL, which need a GPU: "
                           "use reward functions for the CPU rehearsal")


def _gpu_plan(verl: dict[str, Any], cpu: bool, distill: bool) -> GpuPlan:
    """Split the node's GPUs between the student and, for on-policy distillation, the teacher."""
    per_node, nnodes = int(verl.get("n_gpus_per_node", 1)), int(verl.get("nnodes", 1))
    if per_node < 1 or nnodes < 1:
        raise BackendError("verl.n_gpus_per_node and verl.nnodes must be >= 1")
    if cpu:  # one faked "GPU" per node for the student, one more for a teacher (platform.py)
        return GpuPlan(1, nnodes, 1 if distill else 0)
    if not distill:
        return GpuPlan(per_node, nnodes)
    # VERL gives the teacher a separate resource pool that must be > 0 (main_ppo_v0.py).
    teacher = int(verl.get("teacher_gpus_per_node") or max(1, per_node // 2))
    student = per_node - teacher
    if teacher < 1 or student < 1:
        raise BackendError(
            f"on-policy distillation needs a student pool and a teacher pool: {per_node} GPU(s) per node "
            f"cannot hold {max(teacher, 1)} teacher GPU(s) plus at least 1 student GPU. "
            "Use at least 2 GPUs per node, or offline distillation on the local backend.")
    return GpuPlan(student, nnodes, teacher)


def hydra_value(value: Any) -> str:
    """Render one override value in Hydra's grammar (quoted when it has special characters)."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise BackendError(f"non-finite number {value!r} in the job spec")
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    text = str(value)
    if "\\" in text or "${" in text or "\n" in text:
        # Hydra would treat these as escapes/interpolations; no path we write needs them.
        raise BackendError(f"value {text!r} contains a backslash, '${{' or a newline, which VERL's config cannot take")
    if _SAFE_VALUE.fullmatch(text):
        return text
    return "'" + text.replace("'", "\\'") + "'"


def _reward_overrides(reward: RewardView, reward_module: Any, engine: str) -> Pairs:
    models = reward.model_components
    out: Pairs = []
    if len(models) > 1:
        raise BackendError("VERL serves one reward model per run; this job lists several model components")
    if models:
        out += [
            ("reward.reward_model.enable", True),
            ("reward.reward_model.model_path", models[0]["path"]),
            ("reward.reward_model.rollout.name", engine),
            ("reward.reward_model.rollout.tensor_model_parallel_size", 1),
            # Colocated with the actor's rollout engine on the same GPUs.
            ("reward.reward_model.rollout.gpu_memory_utilization", 0.2),
        ]
    if reward_module is not None:
        out += [("reward.custom_reward_function.path", str(reward_module)),
                ("reward.custom_reward_function.name", "compute_score")]
    return out


def merge_overrides(base: Pairs, extra: Pairs) -> Pairs:
    """`base` with `extra` applied: a key in both takes `extra`'s value in `base`'s position."""
    values = dict(base)
    values.update(extra)
    seen = {k for k, _ in base}
    return [(k, values[k]) for k, _ in base] + [(k, v) for k, v in extra if k not in seen]


def build_overrides(spec: dict[str, Any], paths: VerlPaths, n_train_rows: int, resume: Resume,
                    logger_env: dict[str, str] | None = None, chat_template: str | None = None) -> list[str]:
    """The exact `key=value` override list of a job spec (what `VerlBackend` runs, without the file checks)."""
    return VerlJob.from_spec(spec).plan(paths, n_train_rows, resume, logger_env, chat_template)[0]
