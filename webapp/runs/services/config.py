"""Resolve and validate a job's hyperparameters: pure Python, no Django, no torch.

`resolve_config(kind, preset, overrides)` layers defaults < preset < preset-for-kind < user
overrides and returns `(config, errors, warnings)`:
- `config` = {"hp": {...}, "verl": {...}, "kl_guard": {...}} (job.json's "hp" and "verl"; the KL guard
  settings read by webapp.monitoring);
- `errors` / `warnings` = {key: message}, keyed by setting key ("batch_size", "lora.rank",
  "verl.nnodes", "kl_guard.threshold") or, for facts about the job's inputs passed in `context`,
  by input name ("reward_spec", "teacher_model", "dataset_version", "backend").
Overrides may be flat dotted keys, form names ("lora_rank") or nested dicts; values may be strings
(from the CLI's --set), which are coerced by the setting's type.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

from webapp.runs.services.presets import DEFAULT_HP, DEFAULT_KL_GUARD, DEFAULT_VERL, PRESETS

KINDS = ("grpo", "distill", "reward_model")
BACKENDS = ("local", "verl")
ALL = KINDS
KL_RECOMMENDED = (0.01, 0.05)


@dataclass(frozen=True)
class Setting:
    key: str  # "lr", "lora.rank", "verl.rollout_engine", "kl_guard.threshold"
    type: str  # float | int | str | bool | choice
    label: str
    group: str
    help: str = ""
    choices: tuple[str, ...] = ()
    optional: bool = False  # None ("blank") is a valid value
    kinds: tuple[str, ...] = ALL
    backends: tuple[str, ...] = BACKENDS

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


S = Setting
SETTINGS: tuple[Setting, ...] = (
    S("lr", "float", "Learning rate", "Optimisation"),
    S("batch_size", "int", "Batch size (prompts per step)", "Optimisation",
      "GRPO samples group_size responses for each prompt, so a step sees batch_size × group_size sequences."),
    S("mini_batch_size", "int", "Mini batch (prompts per update)", "Optimisation",
      "Blank = the whole batch in one update. Must divide the batch size.", optional=True),
    S("micro_batch_size", "int", "Micro batch (sequences per forward pass)", "Optimisation",
      "Blank = automatic. Lower it when memory is short; on VERL it counts per GPU.", optional=True),
    S("epochs", "int", "Epochs", "Optimisation"),
    S("max_steps", "int", "Max steps", "Optimisation", "Blank = run all epochs.", optional=True),
    S("weight_decay", "float", "Weight decay", "Optimisation"),
    S("warmup_steps", "int", "Warm-up steps", "Optimisation"),
    S("grad_clip", "float", "Gradient clipping (max norm)", "Optimisation"),
    S("seed", "int", "Seed", "Optimisation"),
    S("max_prompt_length", "int", "Max prompt length (tokens)", "Lengths",
      "Prompts longer than this are refused before launch."),
    S("max_response_length", "int", "Max response length (tokens)", "Lengths"),
    S("max_seq_len", "int", "Max sequence length (tokens)", "Lengths",
      "Must hold max prompt length + max response length."),
    S("group_size", "int", "Group size n (samples per prompt)", "GRPO", "GRPO needs at least 2.", kinds=("grpo",)),
    S("kl_coef", "float", "KL coefficient", "GRPO", "Recommended range 0.01–0.05.", kinds=("grpo",)),
    S("kl_loss_type", "choice", "KL estimator", "GRPO", choices=("low_var_kl", "kl", "abs", "mse"),
      kinds=("grpo",)),
    S("temperature", "float", "Sampling temperature", "GRPO", kinds=("grpo", "distill")),
    S("clip_ratio", "float", "Clip ratio", "GRPO", kinds=("grpo",)),
    S("loss_agg_mode", "choice", "Loss aggregation", "GRPO",
      choices=("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"),
      kinds=("grpo",)),
    S("entropy_coeff", "float", "Entropy bonus", "GRPO", kinds=("grpo",)),
    S("distill_temperature", "float", "Distillation temperature T", "Distillation", kinds=("distill",)),
    S("distill_alpha", "float", "Distillation alpha (weight of the CE term)", "Distillation",
      "loss = alpha·CE + (1 − alpha)·T²·KL(teacher_T ‖ student_T)", kinds=("distill",)),
    S("distill_mode", "choice", "Distillation mode", "Distillation",
      "offline: dataset responses; on_policy: the student samples, the teacher scores (VERL needs on_policy).",
      choices=("offline", "on_policy"), kinds=("distill",)),
    S("distill_loss", "choice", "On-policy distillation loss (VERL)", "Distillation",
      choices=("forward_kl_topk", "k3", "low_var_kl", "k2", "mse", "abs"), kinds=("distill",), backends=("verl",)),
    S("lora.rank", "int", "LoRA rank", "LoRA", "0 = full fine-tuning."),
    S("lora.alpha", "int", "LoRA alpha", "LoRA"),
    S("lora.targets", "str", "LoRA target modules", "LoRA", "all-linear, or a comma-separated list."),
    S("save_freq", "int", "Save a checkpoint every N steps", "Checkpoints", "0 = never."),
    S("test_freq", "int", "Validate every N steps", "Checkpoints", "0 = never."),
    S("keep_last_k", "int", "Keep the last K checkpoints", "Checkpoints", "Blank = keep all.", optional=True),
    S("device", "choice", "Device", "Runtime", choices=("auto", "cpu", "cuda")),
    S("dtype", "choice", "Precision", "Runtime", choices=("auto", "float32", "bfloat16")),
    S("kl_guard.enabled", "bool", "KL guard on", "KL guard", kinds=("grpo",)),
    S("kl_guard.threshold", "float", "KL threshold", "KL guard", kinds=("grpo",)),
    S("kl_guard.patience", "int", "Patience (steps above the threshold)", "KL guard", kinds=("grpo",)),
    S("kl_guard.action", "choice", "Action", "KL guard",
      "stop the job, or restore the last checkpoint under the threshold with adjusted settings.",
      choices=("stop", "restore"), kinds=("grpo",)),
    S("kl_guard.lr_factor", "float", "Restore: multiply lr by", "KL guard", "Blank = keep the lr.", optional=True,
      kinds=("grpo",)),
    S("kl_guard.kl_factor", "float", "Restore: multiply KL coefficient by", "KL guard", "Blank = keep it.",
      optional=True, kinds=("grpo",)),
    S("kl_guard.max_rollbacks", "int", "Max restores", "KL guard", kinds=("grpo",)),
    S("verl.rollout_engine", "choice", "Rollout engine", "VERL", choices=("vllm", "sglang"), backends=("verl",)),
    S("verl.n_gpus_per_node", "int", "GPUs per node", "VERL", backends=("verl",)),
    S("verl.nnodes", "int", "Nodes", "VERL", "More than 1 submits to the Ray cluster at RAY_ADDRESS.",
      backends=("verl",)),
    S("verl.tensor_model_parallel_size", "int", "Rollout tensor parallel size", "VERL", backends=("verl",)),
    S("verl.gpu_memory_utilization", "float", "Rollout GPU memory fraction", "VERL", backends=("verl",)),
    S("verl.use_v1", "bool", "VERL V1 trainer (needs TransferQueue)", "VERL", backends=("verl",)),
)
BY_KEY = {s.key: s for s in SETTINGS}
BY_FORM_NAME = {s.form_name: s for s in SETTINGS}


def _get(section: dict, path: list[str]) -> Any:
    for p in path[:-1]:
        section = section.get(p) or {}
    return section.get(path[-1])


def _set(section: dict, path: list[str], value: Any) -> None:
    for p in path[:-1]:
        section = section.setdefault(p, {})
    section[path[-1]] = value


def get_value(config: dict, key: str) -> Any:
    s = BY_KEY[key]
    return _get(config.get(s.section, {}), s.path)


def flatten_overrides(overrides: dict[str, Any] | None) -> dict[str, Any]:
    """{"lora": {"rank": 8}, "verl": {...}, "hp": {...}, "lora_rank": 8} -> {"lora.rank": 8, ...}."""
    flat: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict) and prefix not in BY_KEY:
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        else:
            flat[prefix] = value

    for key, value in (overrides or {}).items():
        key = str(key)
        if key == "hp" and isinstance(value, dict):
            walk("", value)
        elif key.startswith("hp."):
            walk(key[3:], value)
        elif key in BY_FORM_NAME and key not in BY_KEY:
            flat[BY_FORM_NAME[key].key] = value
        else:
            walk(key, value)
    return flat


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
    if t == "int":
        if isinstance(value, bool):
            raise ValueError(f"expected a whole number, got {value!r}")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"expected a whole number, got {value!r}") from None
        if not math.isfinite(number) or number != int(number):
            raise ValueError(f"expected a whole number, got {value!r}")
        return int(number)
    if t == "float":
        if isinstance(value, bool):
            raise ValueError(f"expected a number, got {value!r}")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"expected a number, got {value!r}") from None
        if not math.isfinite(number):
            raise ValueError(f"expected a finite number, got {value!r}")
        return number
    text = str(value)
    if t == "choice" and text not in setting.choices:
        raise ValueError(f"must be one of {', '.join(setting.choices)}, not {text!r}")
    return text


def base_config(kind: str, preset: str) -> dict[str, Any]:
    """Defaults < preset < preset-for-kind (no validation)."""
    config = {"hp": copy.deepcopy(DEFAULT_HP), "verl": copy.deepcopy(DEFAULT_VERL),
              "kl_guard": copy.deepcopy(DEFAULT_KL_GUARD)}
    p = PRESETS.get(preset)
    if p is None:
        return config
    for layer in (p.get("hp") or {}, (p.get("kinds") or {}).get(kind) or {}):
        for k, v in layer.items():
            config["hp"][k] = copy.deepcopy(v)
    config["verl"].update(copy.deepcopy(p.get("verl") or {}))
    config["kl_guard"].update(copy.deepcopy(p.get("kl_guard") or {}))
    return config


def resolve_config(kind: str, preset: str, overrides: dict[str, Any] | None = None, *, backend: str = "local",
                   context: dict[str, Any] | None = None) -> tuple[dict, dict[str, str], dict[str, str]]:
    """Return (config, errors, warnings); see the module docstring.

    `context` carries facts about the job's inputs (all optional): has_reward, has_teacher,
    dataset_kind ("prompts" | "preference"), n_train_rows, n_val_rows,
    longest_prompt = {"length", "unit": "tokens" | "characters", "where"}, model_is_hub.
    """
    errors: dict[str, str] = {}
    warnings: dict[str, str] = {}
    ctx = context or {}
    if kind not in KINDS:
        errors["kind"] = f"Choose a job kind: {', '.join(KINDS)}."
    if backend not in BACKENDS:
        errors["backend"] = f"Choose a backend: {', '.join(BACKENDS)}."
    if preset not in PRESETS:
        errors["preset"] = f"Unknown preset {preset!r}; choose one of {', '.join(PRESETS)}."
    config = base_config(kind, preset)
    for key, raw in flatten_overrides(overrides).items():
        setting = BY_KEY.get(key)
        if setting is None:
            errors[key] = f"Unknown setting {key!r}."
            continue
        try:
            value = coerce(setting, raw)
        except ValueError as exc:
            errors[key] = f"{setting.label}: {exc}."
            continue
        _set(config[setting.section], setting.path, value)
    _check_values(kind, backend, config, errors, warnings)
    _check_context(kind, backend, config, ctx, errors, warnings)
    return config, errors, warnings


def _err(errors: dict, key: str, message: str) -> None:
    errors.setdefault(key, message)


def _check_values(kind: str, backend: str, config: dict, errors: dict, warnings: dict) -> None:
    hp, verl, guard = config["hp"], config["verl"], config["kl_guard"]
    if errors:
        bad = set(errors)
    else:
        bad = set()

    def ok(*keys: str) -> bool:  # skip checks that depend on a value already refused
        return not (bad & set(keys))

    if ok("lr") and not 0 < hp["lr"] < 1:
        _err(errors, "lr", f"Learning rate must be between 0 and 1, got {hp['lr']}.")
    for key in ("batch_size", "epochs", "max_prompt_length", "max_response_length", "max_seq_len"):
        if ok(key) and hp[key] < 1:
            _err(errors, key, f"{BY_KEY[key].label} must be at least 1, got {hp[key]}.")
    for key in ("max_steps", "mini_batch_size", "micro_batch_size", "keep_last_k"):
        if ok(key) and hp.get(key) is not None and hp[key] < 1:
            _err(errors, key, f"{BY_KEY[key].label} must be at least 1 (or blank), got {hp[key]}.")
    for key in ("save_freq", "test_freq", "warmup_steps"):
        if ok(key) and hp[key] < 0:
            _err(errors, key, f"{BY_KEY[key].label} must be 0 or more, got {hp[key]}.")
    if ok("weight_decay") and hp["weight_decay"] < 0:
        _err(errors, "weight_decay", "Weight decay must be 0 or more.")
    if ok("grad_clip") and hp["grad_clip"] <= 0:
        _err(errors, "grad_clip", "Gradient clipping must be above 0.")
    if ok("max_prompt_length", "max_response_length", "max_seq_len") and \
            hp["max_prompt_length"] + hp["max_response_length"] > hp["max_seq_len"]:
        _err(errors, "max_seq_len",
             f"Max sequence length {hp['max_seq_len']} cannot hold max prompt length {hp['max_prompt_length']} "
             f"+ max response length {hp['max_response_length']} = "
             f"{hp['max_prompt_length'] + hp['max_response_length']}.")
    if ok("temperature") and hp["temperature"] <= 0:
        _err(errors, "temperature", "Temperature must be above 0.")
    lora = hp.get("lora") or {}
    if ok("lora.rank") and lora.get("rank", 0) < 0:
        _err(errors, "lora.rank", "LoRA rank must be 0 (off) or more.")
    if ok("lora.alpha") and lora.get("rank", 0) > 0 and lora.get("alpha", 0) <= 0:
        _err(errors, "lora.alpha", "LoRA alpha must be above 0.")
    if ok("lora.targets") and lora.get("rank", 0) > 0 and not str(lora.get("targets", "")).strip():
        _err(errors, "lora.targets", "Name the LoRA target modules (or all-linear).")
    if kind == "grpo":
        _check_grpo(hp, errors, warnings, ok)
    if kind == "distill":
        if ok("distill_temperature") and hp["distill_temperature"] <= 0:
            _err(errors, "distill_temperature", "Distillation temperature must be above 0.")
        if ok("distill_alpha") and not 0 <= hp["distill_alpha"] <= 1:
            _err(errors, "distill_alpha", f"Distillation alpha must be between 0 and 1, got {hp['distill_alpha']}.")
    _check_batches(kind, backend, hp, verl, errors, ok)
    if backend == "verl":
        _check_verl(kind, hp, verl, errors, ok)
    if kind == "grpo" and guard.get("enabled"):
        if ok("kl_guard.threshold") and guard["threshold"] <= 0:
            _err(errors, "kl_guard.threshold", "The KL threshold must be above 0.")
        if ok("kl_guard.patience") and guard["patience"] < 1:
            _err(errors, "kl_guard.patience", "Patience must be at least 1 step.")
        if ok("kl_guard.lr_factor") and guard.get("lr_factor") is not None and not 0 < guard["lr_factor"] < 1:
            _err(errors, "kl_guard.lr_factor", "The lr factor must be between 0 and 1: a restore lowers the learning "
                                               "rate (blank = keep it).")
        if ok("kl_guard.kl_factor") and guard.get("kl_factor") is not None and guard["kl_factor"] <= 1:
            _err(errors, "kl_guard.kl_factor", "The KL factor must be above 1: a restore strengthens the penalty "
                                               "(blank = keep it).")
        if ok("kl_guard.lr_factor", "kl_guard.kl_factor", "kl_guard.action") and guard["action"] == "restore" \
                and guard.get("lr_factor") is None and guard.get("kl_factor") is None:
            _err(errors, "kl_guard.action", "Restore needs an lr factor or a KL factor to change something.")
        if ok("kl_guard.max_rollbacks") and guard["max_rollbacks"] < 0:
            _err(errors, "kl_guard.max_rollbacks", "Max restores must be 0 or more.")
        if ok("kl_guard.action", "save_freq") and guard["action"] == "restore" and hp["save_freq"] == 0:
            _err(errors, "kl_guard.action", "Restore needs checkpoints: set a save frequency, or choose stop.")


def _check_grpo(hp: dict, errors: dict, warnings: dict, ok) -> None:
    if ok("group_size") and hp["group_size"] < 2:
        _err(errors, "group_size", "GRPO needs a group size n of at least 2 (it compares the samples of one prompt), "
                                   f"got {hp['group_size']}.")
    if ok("clip_ratio") and not 0 < hp["clip_ratio"] < 1:
        _err(errors, "clip_ratio", f"Clip ratio must be between 0 and 1, got {hp['clip_ratio']}.")
    if ok("kl_coef"):
        kl = hp["kl_coef"]
        low, high = KL_RECOMMENDED
        if kl < 0:
            _err(errors, "kl_coef", "The KL coefficient cannot be negative.")
        elif kl == 0:
            warnings["kl_coef"] = ("KL coefficient 0: nothing keeps the policy near the reference; "
                                   "reward hacking is likely.")
        elif not low <= kl <= high:
            risk = "the policy may drift and hack the reward" if kl < low else "learning may stall"
            warnings["kl_coef"] = f"KL coefficient {kl:g} is outside the usual {low:g}–{high:g}: {risk}."


def _check_batches(kind: str, backend: str, hp: dict, verl: dict, errors: dict, ok) -> None:
    if not ok("batch_size", "group_size", "mini_batch_size", "micro_batch_size", "verl.n_gpus_per_node",
              "verl.nnodes"):
        return
    batch = hp["batch_size"]
    group = hp["group_size"] if kind == "grpo" else 1
    mini = hp.get("mini_batch_size") or batch
    micro = hp.get("micro_batch_size")
    if mini > batch:
        _err(errors, "mini_batch_size", f"The mini batch ({mini}) cannot be larger than the batch ({batch}).")
        return
    if batch % mini:
        _err(errors, "batch_size", f"Batch size {batch} is not divisible by the mini batch {mini}.")
        return
    gpus = 1
    if backend == "verl":
        gpus = max(1, verl["n_gpus_per_node"]) * max(1, verl["nnodes"])
        if kind == "distill" and hp.get("distill_mode") == "on_policy" and verl["n_gpus_per_node"] >= 2:
            gpus = (verl["n_gpus_per_node"] - max(1, verl["n_gpus_per_node"] // 2)) * verl["nnodes"]
        if (batch * group) % gpus:
            _err(errors, "batch_size", f"Batch size × group size = {batch * group} sequences cannot be split evenly "
                                       f"over {gpus} GPU(s).")
            return
        if (mini * group) % gpus:
            _err(errors, "mini_batch_size", f"Mini batch × group size = {mini * group} sequences cannot be split "
                                            f"evenly over {gpus} GPU(s).")
            return
    per_update = mini * group // gpus
    if micro is not None and per_update % micro:
        unit = "per GPU " if gpus > 1 else ""
        _err(errors, "micro_batch_size",
             f"Each update holds {per_update} sequences {unit}(mini batch {mini} × group size {group}"
             f"{f' / {gpus} GPUs' if gpus > 1 else ''}), which is not divisible by the micro batch {micro}.")


def _check_verl(kind: str, hp: dict, verl: dict, errors: dict, ok) -> None:
    if kind == "reward_model":
        _err(errors, "backend", "Reward-model training runs on the local backend; VERL trains policies.")
    if kind == "distill" and ok("distill_mode") and hp["distill_mode"] != "on_policy":
        _err(errors, "distill_mode", "VERL only does on-policy distillation: choose on_policy, or the local backend.")
    if ok("device") and hp["device"] == "cpu":
        _err(errors, "device", "VERL needs GPUs: choose auto or cuda, or the local backend for CPU.")
    for key in ("verl.n_gpus_per_node", "verl.nnodes", "verl.tensor_model_parallel_size"):
        if ok(key) and get_value({"verl": verl}, key) < 1:
            _err(errors, key, f"{BY_KEY[key].label} must be at least 1.")
    if ok("verl.tensor_model_parallel_size", "verl.n_gpus_per_node") and verl["tensor_model_parallel_size"] >= 1 \
            and verl["n_gpus_per_node"] % verl["tensor_model_parallel_size"]:
        _err(errors, "verl.tensor_model_parallel_size",
             f"Tensor parallel size {verl['tensor_model_parallel_size']} must divide the "
             f"{verl['n_gpus_per_node']} GPUs per node.")
    if ok("verl.gpu_memory_utilization") and not 0 < verl["gpu_memory_utilization"] <= 1:
        _err(errors, "verl.gpu_memory_utilization", "The rollout memory fraction must be in (0, 1].")
    if kind == "distill" and ok("verl.n_gpus_per_node") and verl["n_gpus_per_node"] < 2:
        _err(errors, "verl.n_gpus_per_node", "On-policy distillation on VERL needs at least 2 GPUs per node "
                                             "(one pool for the student, one for the teacher).")
    if ok("lora.rank") and (hp.get("lora") or {}).get("rank", 0) > 512:
        _err(errors, "lora.rank", "vLLM accepts LoRA ranks up to 512.")


def _check_context(kind: str, backend: str, config: dict, ctx: dict, errors: dict, warnings: dict) -> None:
    hp = config["hp"]
    if kind == "grpo" and ctx.get("has_reward") is False:
        _err(errors, "reward_spec", "GRPO needs a reward: pick at least one reward function or reward model.")
    if kind == "distill" and ctx.get("has_teacher") is False:
        _err(errors, "teacher_model", "Distillation needs a teacher model.")
    dkind = ctx.get("dataset_kind")
    if dkind:
        if kind == "grpo" and dkind != "prompts":
            _err(errors, "dataset_version", "GRPO trains on verifiable prompts; this dataset holds preference pairs.")
        if kind == "reward_model" and dkind != "preference":
            _err(errors, "dataset_version", "A reward model trains on preference pairs; this dataset holds prompts.")
    n_train = ctx.get("n_train_rows")
    if n_train is not None:
        if n_train == 0:
            _err(errors, "dataset_version", "No training rows are left after review filtering: "
                                            "review more pairs or include unreviewed ones.")
        elif "batch_size" not in errors and hp["batch_size"] > n_train:
            warnings["batch_size"] = (f"Batch size {hp['batch_size']} is larger than the {n_train} training rows; "
                                      f"VERL lowers it to {n_train} (one step per epoch).")
    if backend == "verl" and ctx.get("n_val_rows") == 0:
        _err(errors, "dataset_version", "VERL needs validation rows: this dataset version has none.")
    if ctx.get("longest_prompt"):
        check_prompt_length(hp, ctx["longest_prompt"], errors, warnings)
    if ctx.get("model_is_hub"):
        if backend == "local":
            _err(errors, "base_model", "A hub model needs a GPU worker with hub access (VERL backend); the local "
                                       "backend runs offline from a registered folder.")
        else:
            warnings["base_model"] = "This is a hub id: only GPU workers with hub access can load it."


def check_prompt_length(hp: dict, longest: dict | None, errors: dict, warnings: dict) -> None:
    """Refuse a prompt longer than max_prompt_length (tokens); only warn when counted in characters."""
    if not longest or "max_prompt_length" in errors:
        return
    length, unit, where = longest["length"], longest.get("unit", "tokens"), longest.get("where", "a row")
    if length > hp["max_prompt_length"]:
        message = (f"The longest prompt ({where}) is {length} {unit}, longer than the max prompt length "
                   f"{hp['max_prompt_length']}.")
        if unit == "tokens":
            _err(errors, "max_prompt_length", message + " Raise it, or remove the row.")
        else:
            warnings["max_prompt_length"] = message + " (Counted in characters: no local tokenizer.)"


def job_spec_preview(kind: str, backend: str, config: dict, **extra: Any) -> dict[str, Any]:
    """The parts of job.json that come from the config (used for the YAML preview)."""
    spec = {"kind": kind, "backend": backend, **extra, "hp": config["hp"]}
    if backend == "verl":
        spec["verl"] = config["verl"]
    if kind == "grpo":
        spec["kl_guard"] = config["kl_guard"]
    return spec


def to_yaml(data: Any) -> str:
    import yaml

    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True)


def parse_set_args(items: list[str] | None) -> dict[str, str]:
    """CLI `--set key=value` pairs -> {key: value}; ValueError names the bad item."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--set expects key=value, got {item!r}")
        out[key.strip()] = value
    return out


def settings_for(kind: str, backend: str) -> list[Setting]:
    return [s for s in SETTINGS if kind in s.kinds and backend in s.backends]
