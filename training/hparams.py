"""Every hyperparameter of a job, defined once: pure Python, no Django, no torch.

One `Setting` per setting: type, default, range or choices, help, form group, the job kinds and
backends that offer it, and how it reaches VERL. The New job form, the web app's validation,
the presets, the local trainer's config and the VERL override list are all built from `SETTINGS`.

How a setting reaches VERL (`Setting.verl`):
- `Verl(paths)`: the value goes unchanged to each Hydra path of VERL 0.9.1's ppo_trainer.yaml;
- `Verl(paths, convert=fn)`: `fn(value, spec)` returns the (path, value) pairs (unit changes, a
  switch that goes with the value, nothing at all to keep VERL's default);
- `Verl(paths, planned=True)`: several settings decide the value together (batch sizes over the
  GPUs, the teacher's GPU pool), so `training.backends.verl_overrides` plans it.
A setting with `app=True` is acted on by the app itself on every backend (the KL guard, checkpoint
retention). A setting without either is not offered for VERL.
"""
from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

KINDS = ("grpo", "distill", "reward_model")
POLICY_KINDS = ("grpo", "distill")
BACKENDS = ("local", "verl")
SECTIONS = ("hp", "verl", "kl_guard")
STRATEGIES = ("fsdp", "fsdp2", "megatron")
ROLLOUT_ENGINES = ("vllm", "sglang", "hf")  # hf: the CPU rollout
GPU_ENGINES = ("vllm", "sglang")
# Largest LoRA rank vLLM accepts (verl/workers/rollout/vllm_rollout/utils.py: MaxLoRARanks).
MAX_LORA_RANK = 512
# The KL guard watches this metric (VERL's name; the local trainer logs the same one).
KL_GUARD_METRIC = "actor/kl_loss"

Pairs = list[tuple[str, Any]]


@dataclass(frozen=True)
class Verl:
    paths: tuple[str, ...]
    convert: Callable[[Any, dict], Pairs] | None = None
    planned: bool = False


@dataclass(frozen=True)
class Setting:
    key: str  # "lr", "lora.rank", "verl.rollout_engine", "kl_guard.threshold"
    type: str  # float | int | str | bool | choice
    default: Any
    label: str
    group: str
    help: str = ""
    choices: tuple[str, ...] = ()
    optional: bool = False  # None ("blank") is a valid value
    low: float | None = None  # range; `low_open`/`high_open` exclude the bound itself
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    kinds: tuple[str, ...] = KINDS
    local: bool = True  # the local trainer reads it
    verl: Verl | None = None
    app: bool = False  # acted on by the app (monitoring, queues) whatever the backend

    @property
    def backends(self) -> tuple[str, ...]:
        out = ("local",) if self.local or self.app else ()
        return out + (("verl",) if self.verl is not None or self.app else ())

    def offered(self, kind: str, backend: str) -> bool:
        return kind in self.kinds and backend in self.backends

    @property
    def form_name(self) -> str:
        return self.key.replace(".", "_")

    @property
    def section(self) -> str:
        head = self.key.split(".", 1)[0]
        return head if head in ("verl", "kl_guard") else "hp"

    @property
    def path(self) -> list[str]:
        parts = self.key.split(".")
        return parts[1:] if self.section != "hp" else parts

    def range_error(self, value: Any) -> str | None:
        """The message when `value` is outside the setting's range (None and non-numbers pass)."""
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        low_bad = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        high_bad = self.high is not None and (value >= self.high if self.high_open else value > self.high)
        if not (low_bad or high_bad):
            return None
        blank = " (or blank)" if self.optional else ""
        if self.low is not None and self.high is not None:
            return f"{self.label} must be between {self.low:g} and {self.high:g}{blank}, got {value:g}."
        if self.low is not None:
            bound = "above" if self.low_open else "at least"
            if self.low == 0 and not self.low_open:
                return f"{self.label} cannot be negative, got {value:g}."
            return f"{self.label} must be {bound} {self.low:g}{blank}, got {value:g}."
        bound = "below" if self.high_open else "at most"
        return f"{self.label} must be {bound} {self.high:g}{blank}, got {value:g}."


# -- converters: form value -> VERL's (path, value) pairs ----------------------------------------------

ACTOR = "actor_rollout_ref.actor"
ROLLOUT = "actor_rollout_ref.rollout"
MODEL = "actor_rollout_ref.model"


def _lora_rank(rank: Any, spec: dict) -> Pairs:
    rank = int(rank or 0)
    if rank <= 0:
        return []
    if value_of(spec, "verl.strategy") == "megatron":
        raise ValueError("LoRA names Hugging Face modules, which Megatron does not use: use FSDP/FSDP2 for LoRA")
    if rank > MAX_LORA_RANK:
        raise ValueError(f"hp.lora.rank={rank} is above vLLM's maximum LoRA rank ({MAX_LORA_RANK})")
    # LoRA examples in verl: load real weights into the rollout and sync adapters layer by layer.
    return [(f"{MODEL}.lora_rank", rank), (f"{ROLLOUT}.load_format", "safetensors"),
            (f"{ROLLOUT}.layered_summon", True)]


def _lora_rank_of(spec: dict) -> int:
    return int(((spec.get("hp") or {}).get("lora") or {}).get("rank") or 0)


def _lora_alpha(alpha: Any, spec: dict) -> Pairs:
    return [(f"{MODEL}.lora_alpha", alpha)] if _lora_rank_of(spec) > 0 else []


def lora_targets(targets: Any) -> str | list[str]:
    """"all-linear" stays a string; "q_proj, v_proj" becomes ["q_proj", "v_proj"]."""
    targets = targets or "all-linear"
    if isinstance(targets, str) and targets != "all-linear":
        return [t.strip() for t in targets.split(",") if t.strip()]
    return targets


def _lora_targets(targets: Any, spec: dict) -> Pairs:
    return [(f"{MODEL}.target_modules", lora_targets(targets))] if _lora_rank_of(spec) > 0 else []


def _kl_coef(kl: Any, spec: dict) -> Pairs:
    distill = spec.get("kind") == "distill"  # the teacher replaces the reference policy
    return [(f"{ACTOR}.use_kl_loss", float(kl) > 0 and not distill), (f"{ACTOR}.kl_loss_coef", float(kl))]


def _every(path: str) -> Callable[[Any, dict], Pairs]:
    """0 means "never" in the form; VERL spells it -1."""
    return lambda value, spec: [(path, int(value) if value else -1)]


def _unless_none(path: str) -> Callable[[Any, dict], Pairs]:
    return lambda value, spec: [] if value is None else [(path, value)]


def _device(device: Any, spec: dict) -> Pairs:
    return [("trainer.device", "cpu" if device == "cpu" else "cuda")]


def _dtype(dtype: Any, spec: dict) -> Pairs:
    return [] if dtype == "auto" else [(f"{ROLLOUT}.dtype", dtype)]


# -- the settings ----------------------------------------------------------------------------------

S = Setting
SETTINGS: tuple[Setting, ...] = (
    S("lr", "float", 1e-6, "Learning rate", "Optimisation", low=0, high=1, low_open=True, high_open=True,
      verl=Verl((f"{ACTOR}.optim.lr",))),
    S("batch_size", "int", 64, "Batch size (prompts per step)", "Optimisation",
      "GRPO samples group_size responses for each prompt, so a step sees batch_size × group_size sequences.",
      low=1, verl=Verl(("data.train_batch_size",), planned=True)),
    S("mini_batch_size", "int", None, "Mini batch (prompts per update)", "Optimisation",
      "Blank = the whole batch in one update. Must divide the batch size.", optional=True, low=1,
      verl=Verl((f"{ACTOR}.ppo_mini_batch_size",), planned=True)),
    S("micro_batch_size", "int", None, "Micro batch (sequences per forward pass)", "Optimisation",
      "Blank = automatic. Lower it when memory is short; on VERL it counts per GPU.", optional=True, low=1,
      verl=Verl((f"{ACTOR}.ppo_micro_batch_size_per_gpu", f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu",
                 "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"), planned=True)),
    S("epochs", "int", 3, "Epochs", "Optimisation", low=1, verl=Verl(("trainer.total_epochs",))),
    S("max_steps", "int", None, "Max steps", "Optimisation", "Blank = run all epochs.", optional=True, low=1,
      verl=Verl(("trainer.total_training_steps",), convert=_unless_none("trainer.total_training_steps"))),
    S("weight_decay", "float", 0.0, "Weight decay", "Optimisation", low=0,
      verl=Verl((f"{ACTOR}.optim.weight_decay",))),
    S("warmup_steps", "int", 0, "Warm-up steps", "Optimisation", "Linear learning-rate warm-up from 0.", low=0,
      verl=Verl((f"{ACTOR}.optim.lr_warmup_steps",))),
    S("grad_clip", "float", 1.0, "Gradient clipping (max norm)", "Optimisation", low=0, low_open=True,
      verl=Verl((f"{ACTOR}.optim.clip_grad",))),
    S("seed", "int", 1, "Seed", "Optimisation", verl=Verl(("data.seed", f"{ROLLOUT}.seed"))),
    S("max_prompt_length", "int", 512, "Max prompt length (tokens)", "Lengths",
      "Prompts longer than this are refused before launch.", low=1, verl=Verl(("data.max_prompt_length",))),
    S("max_response_length", "int", 1536, "Max response length (tokens)", "Lengths", low=1,
      verl=Verl(("data.max_response_length",))),
    S("max_seq_len", "int", 2048, "Max sequence length (tokens)", "Lengths",
      "Must hold max prompt length + max response length.", low=1, verl=Verl((f"{ROLLOUT}.max_model_len",))),
    S("group_size", "int", 4, "Group size n (samples per prompt)", "GRPO", "GRPO needs at least 2.",
      kinds=("grpo",), verl=Verl((f"{ROLLOUT}.n",), planned=True)),
    S("kl_coef", "float", 0.02, "KL coefficient", "GRPO", "Recommended range 0.01–0.05.", low=0, kinds=("grpo",),
      verl=Verl((f"{ACTOR}.kl_loss_coef",), convert=_kl_coef)),
    S("kl_loss_type", "choice", "low_var_kl", "KL estimator", "GRPO", choices=("low_var_kl", "kl", "abs", "mse"),
      kinds=("grpo",), verl=Verl((f"{ACTOR}.kl_loss_type",))),
    S("temperature", "float", 1.0, "Sampling temperature", "GRPO", low=0, low_open=True, kinds=POLICY_KINDS,
      verl=Verl((f"{ROLLOUT}.temperature",))),
    S("clip_ratio", "float", 0.2, "Clip ratio", "GRPO", low=0, high=1, low_open=True, high_open=True,
      kinds=("grpo",), verl=Verl((f"{ACTOR}.clip_ratio_low", f"{ACTOR}.clip_ratio_high"))),
    S("loss_agg_mode", "choice", "token-mean", "Loss aggregation", "GRPO",
      choices=("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"),
      kinds=("grpo",), verl=Verl((f"{ACTOR}.loss_agg_mode",))),
    S("entropy_coeff", "float", 0.0, "Entropy bonus", "GRPO", low=0, kinds=("grpo",),
      verl=Verl((f"{ACTOR}.entropy_coeff",))),
    S("distill_temperature", "float", 2.0, "Distillation temperature T", "Distillation", low=0, low_open=True,
      kinds=("distill",)),
    S("distill_alpha", "float", 0.5, "Distillation alpha (weight of the CE term)", "Distillation",
      "loss = alpha·CE + (1 − alpha)·T²·KL(teacher_T ‖ student_T)", low=0, high=1, kinds=("distill",)),
    S("distill_mode", "choice", "offline", "Distillation mode", "Distillation",
      "offline: dataset responses; on_policy: the student samples, the teacher scores (VERL needs on_policy).",
      choices=("offline", "on_policy"), kinds=("distill",), verl=Verl(("distillation.enabled",), planned=True)),
    S("distill_loss", "choice", "forward_kl_topk", "On-policy distillation loss (VERL)", "Distillation",
      choices=("forward_kl_topk", "k3", "low_var_kl", "k2", "mse", "abs"), kinds=("distill",), local=False,
      verl=Verl(("distillation.distillation_loss.loss_mode",))),
    S("lora.rank", "int", 0, "LoRA rank", "LoRA", "0 = full fine-tuning.", low=0,
      verl=Verl((f"{MODEL}.lora_rank",), convert=_lora_rank)),
    S("lora.alpha", "int", 16, "LoRA alpha", "LoRA", verl=Verl((f"{MODEL}.lora_alpha",), convert=_lora_alpha)),
    S("lora.targets", "str", "all-linear", "LoRA target modules", "LoRA", "all-linear, or a comma-separated list.",
      verl=Verl((f"{MODEL}.target_modules",), convert=_lora_targets)),
    S("save_freq", "int", 10, "Save a checkpoint every N steps", "Checkpoints", "0 = never.", low=0,
      verl=Verl(("trainer.save_freq",), convert=_every("trainer.save_freq"))),
    S("test_freq", "int", 5, "Validate every N steps", "Checkpoints", "0 = never.", low=0,
      verl=Verl(("trainer.test_freq",), convert=_every("trainer.test_freq"))),
    S("keep_last_k", "int", 3, "Keep the last K checkpoints", "Checkpoints", "Blank = keep all.", optional=True,
      low=1, app=True),
    S("rollout_keep_last", "int", 50, "Rollout store: keep the last N steps", "Rollout store",
      "Every step's samples are kept for browsing and re-scoring; older ones are pruned. Blank = keep all.",
      optional=True, low=1, kinds=POLICY_KINDS, app=True),
    S("rollout_keep_every", "int", 10, "Rollout store: and every k-th older step", "Rollout store",
      "Blank = none of the older steps.", optional=True, low=1, kinds=POLICY_KINDS, app=True),
    S("rollout_max_mb", "float", 512.0, "Rollout store: at most (MB)", "Rollout store",
      "The oldest kept steps go first when the store is larger; the newest step always stays. Blank = no cap.",
      optional=True, low=0, low_open=True, kinds=POLICY_KINDS, app=True),
    S("device", "choice", "auto", "Device", "Runtime", "VERL on cpu: FSDP2 with the CPU rollout (hf).",
      choices=("auto", "cpu", "cuda"), verl=Verl(("trainer.device",), convert=_device)),
    S("dtype", "choice", "auto", "Precision", "Runtime", "auto: float32 on CPU, bfloat16 on GPUs.",
      choices=("auto", "float32", "bfloat16"), verl=Verl((f"{ROLLOUT}.dtype",), convert=_dtype)),
    S("reward_workers", "int", None, "Reward scoring processes", "Runtime",
      "Sandboxes that score a batch's rewards at once: the job's CPU budget for reward code. Blank = min(CPU "
      "cores, 4). On VERL they are shared out over VERL's reward workers (at most 4, one sandbox each or more).",
      optional=True, low=1, high=64, kinds=POLICY_KINDS, app=True),
    S("kl_guard.enabled", "bool", True, "KL guard on", "KL guard", kinds=("grpo",), app=True),
    S("kl_guard.threshold", "float", 0.1, "KL threshold", "KL guard", low=0, low_open=True, kinds=("grpo",),
      app=True),
    S("kl_guard.patience", "int", 3, "Patience (steps above the threshold)", "KL guard", low=1, kinds=("grpo",),
      app=True),
    S("kl_guard.action", "choice", "stop", "Action", "KL guard",
      "stop the job, or restore the last checkpoint under the threshold with adjusted settings.",
      choices=("stop", "restore"), kinds=("grpo",), app=True),
    S("kl_guard.lr_factor", "float", 0.5, "Restore: multiply lr by", "KL guard", "Blank = keep the lr.",
      optional=True, kinds=("grpo",), app=True),
    S("kl_guard.kl_factor", "float", 2.0, "Restore: multiply KL coefficient by", "KL guard", "Blank = keep it.",
      optional=True, kinds=("grpo",), app=True),
    S("kl_guard.max_rollbacks", "int", 2, "Max restores", "KL guard", low=0, kinds=("grpo",), app=True),
    S("verl.strategy", "choice", "fsdp", "Training strategy", "VERL",
      "FSDP or FSDP2 on GPUs or CPU (CPU: FSDP2); Megatron needs GPUs.", choices=STRATEGIES,
      kinds=POLICY_KINDS, local=False, verl=Verl((f"{ACTOR}.strategy",))),
    S("verl.rollout_engine", "choice", "vllm", "Rollout engine", "VERL",
      "vLLM or SGLang on GPU workers; hf is the CPU rollout (device cpu).", choices=ROLLOUT_ENGINES,
      kinds=POLICY_KINDS, local=False, verl=Verl((f"{ROLLOUT}.name",))),
    S("verl.n_gpus_per_node", "int", 1, "GPUs per node", "VERL", low=1, kinds=POLICY_KINDS, local=False,
      verl=Verl(("trainer.n_gpus_per_node",), planned=True)),
    S("verl.nnodes", "int", 1, "Nodes", "VERL", "More than 1 submits to the Ray cluster at RAY_ADDRESS.", low=1,
      kinds=POLICY_KINDS, local=False, verl=Verl(("trainer.nnodes",), planned=True)),
    S("verl.tensor_model_parallel_size", "int", 1, "Rollout tensor parallel size", "VERL", low=1,
      kinds=POLICY_KINDS, local=False, verl=Verl((f"{ROLLOUT}.tensor_model_parallel_size",))),
    S("verl.gpu_memory_utilization", "float", 0.4, "Rollout GPU memory fraction", "VERL", low=0, high=1,
      low_open=True, kinds=POLICY_KINDS, local=False, verl=Verl((f"{ROLLOUT}.gpu_memory_utilization",))),
    S("verl.use_v1", "bool", False, "VERL V1 trainer (needs TransferQueue)", "VERL", kinds=POLICY_KINDS,
      local=False, verl=Verl(("trainer.use_v1",))),
)
BY_KEY: dict[str, Setting] = {s.key: s for s in SETTINGS}
BY_FORM_NAME: dict[str, Setting] = {s.form_name: s for s in SETTINGS}


def get_in(section: dict, path: list[str]) -> Any:
    for p in path[:-1]:
        section = section.get(p) or {}
    return section.get(path[-1])


def set_in(section: dict, path: list[str], value: Any) -> None:
    for p in path[:-1]:
        section = section.setdefault(p, {})
    section[path[-1]] = value


def has_in(section: dict, path: list[str]) -> bool:
    for p in path[:-1]:
        section = section.get(p)
        if not isinstance(section, dict):
            return False
    return path[-1] in section


def value_of(config: dict, key: str) -> Any:
    """A setting's value in a config/spec ({"hp", "verl", "kl_guard"}); its default when absent."""
    s = BY_KEY[key]
    section = config.get(s.section) or {}
    return get_in(section, s.path) if has_in(section, s.path) else copy.deepcopy(s.default)


def defaults(section: str) -> dict[str, Any]:
    """The defaults of one section, nested like job.json ("lora" is a dict in "hp")."""
    out: dict[str, Any] = {"metric": KL_GUARD_METRIC} if section == "kl_guard" else {}
    for s in SETTINGS:
        if s.section == section:
            set_in(out, s.path, copy.deepcopy(s.default))
    return out


def default_config() -> dict[str, dict[str, Any]]:
    return {section: defaults(section) for section in SECTIONS}


def settings_for(kind: str, backend: str) -> list[Setting]:
    return [s for s in SETTINGS if s.offered(kind, backend)]


def coerce(setting: Setting, value: Any) -> Any:
    """Convert a raw value (maybe a string from the CLI) to the setting's type; ValueError with a message."""
    if isinstance(value, str):
        value = value.strip()
        if value.lower() in ("", "none", "null") and (setting.optional or value == ""):
            if setting.optional:
                return None
            raise ValueError("a value is required")
    if value is None:
        if setting.optional:
            return None
        raise ValueError("a value is required")
    t = setting.type
    if t == "bool":
        if isinstance(value, bool):
            return value
        text = str(value).lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"expected true or false, got {value!r}")
    if t in ("int", "float"):
        what = "a whole number" if t == "int" else "a number"
        if isinstance(value, bool):
            raise ValueError(f"expected {what}, got {value!r}")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"expected {what}, got {value!r}") from None
        if not math.isfinite(number):
            raise ValueError(f"expected a finite number, got {value!r}")
        if t == "int":
            if number != int(number):
                raise ValueError(f"expected a whole number, got {value!r}")
            return int(number)
        return number
    text = str(value)
    if t == "choice" and text not in setting.choices:
        raise ValueError(f"must be one of {', '.join(setting.choices)}, not {text!r}")
    return text


def verl_pairs(setting: Setting, value: Any, spec: dict) -> Pairs:
    """The (Hydra path, value) pairs one setting adds to VERL's overrides (none for planned ones)."""
    m = setting.verl
    if m is None or m.planned:
        return []
    if m.convert is not None:
        return m.convert(value, spec)
    return [(path, value) for path in m.paths]
