"""Resolve and validate a job's hyperparameters: pure Python, no Django, no torch.

The settings themselves (type, default, range, help, group, kinds, backends, VERL keys) are
defined once in `training.hparams`; this module layers and checks them for the web app.

`resolve_config(kind, preset, overrides)` layers defaults < preset < preset-for-kind (or a job's
stored config, `base`) < user overrides and returns `(config, errors, warnings)`:
- `config` = {"hp": {...}, "verl": {...}} (job.json's "hp" and "verl"), plus what is declared per job rather
  than set: "guard_rules" (the run-health rules, the KL guard among them: `training.guard_rules`), "stall"
  and "human_eval" (read by webapp.monitoring);
- `errors` / `warnings` = {key: message}, keyed by setting key ("batch_size", "lora.rank",
  "verl.nnodes", "guard_rules.<rule name>") or, for facts about the job's inputs passed in `context`,
  by input name ("reward_spec", "teacher_model", "dataset_version", "backend").
Overrides may be flat dotted keys, form names ("lora_rank") or nested dicts; values may be strings
(from the CLI's --set), which are coerced by the setting's type.
"""
from __future__ import annotations

import copy
from typing import Any

from training.guard_rules import BRANCH, RESTORE, RuleConfigError, parse_rules
from training.hparams import (
    BACKENDS,
    BY_FORM_NAME,
    BY_KEY,
    GPU_ENGINES,
    KINDS,
    MAX_LORA_RANK,
    SECTIONS,
    SETTINGS,
    Setting,
    apply_overrides,
    coerce,
    default_config,
    has_in,
    parse_section,
    set_in,
    settings_for,
    value_of,
)
from training.presets import PRESETS
from training.stall import StallConfig, StallConfigError

__all__ = ["BACKENDS", "BY_FORM_NAME", "BY_KEY", "KINDS", "PRESETS", "SETTINGS", "Setting", "base_config",
           "coerce", "flatten_overrides", "get_value", "parse_set_args",
           "resolve_config", "settings_for", "to_yaml"]

def get_value(config: dict, key: str) -> Any:
    return value_of(config, key)


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


def _stored_config(stored: dict) -> dict[str, Any]:
    """A job's stored config over the schema's defaults (settings added since it was saved get theirs)."""
    config = default_config()
    for s in SETTINGS:
        section = stored.get(s.section) or {}
        if has_in(section, s.path):
            set_in(config[s.section], s.path, copy.deepcopy(value_of(stored, s.key)))
    for section in SECTIONS:  # keep what is not a setting (e.g. a key an older app wrote)
        for k, v in (stored.get(section) or {}).items():
            config[section].setdefault(k, copy.deepcopy(v))
    for key in ("guard_rules", "stall", "human_eval"):  # run health, declared per job (not settings)
        if stored.get(key):
            config[key] = copy.deepcopy(stored[key])
    return config


HUMAN_EVAL_AGAINST = ("previous", "base")


def check_human_eval(block: Any) -> str | None:
    """What is wrong with a periodic human-evaluation schedule, or None. Shape: {"every": N >= 1,
    "against": "previous" | "base", "items": 1..200, "dataset_version": id | None, "split": "val" | "train",
    "reward_rise": >= 0, "max_response_length": 1..4096}."""
    if not isinstance(block, dict):
        return "it must be an object"
    unknown = sorted(set(block) - {"every", "against", "items", "dataset_version", "split", "reward_rise",
                                   "max_response_length"})
    if unknown:
        return f"unknown keys {', '.join(unknown)}"
    for key, lo, hi in (("every", 1, 10_000), ("items", 1, 200), ("max_response_length", 1, 4096)):
        value = block.get(key)
        if value is None and key != "every":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            return f"{key} must be a whole number from {lo} to {hi}"
    if block.get("against", "previous") not in HUMAN_EVAL_AGAINST:
        return "against must be 'previous' or 'base'"
    if block.get("split", "val") not in ("val", "train"):
        return "split must be 'val' or 'train'"
    rise = block.get("reward_rise", 0.1)
    if isinstance(rise, bool) or not isinstance(rise, (int, float)) or not rise >= 0:
        return "reward_rise must be a number of at least 0"
    version = block.get("dataset_version")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
        return "dataset_version must be a dataset version id"
    return None


def resolve_config(kind: str, preset: str, overrides: dict[str, Any] | None = None, *, backend: str = "local",
                   context: dict[str, Any] | None = None,
                   base: dict | None = None) -> tuple[dict, dict[str, str], dict[str, str]]:
    """Return (config, errors, warnings); see the module docstring.

    `base` (a job's stored config) replaces the preset as the starting point: resume, rollback and
    clone keep the job's settings plus the given edits.
    `context` carries facts about the job's inputs (all optional): has_reward, has_teacher,
    dataset_kind ("prompts" | "preference"), n_train_rows, n_val_rows, model_is_hub,
    model_context_length (the base model's max_position_embeddings). How the prompts fit the lengths is
    the launch's length pre-flight (training/length_preflight.py).
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
    config = _stored_config(base) if base is not None else base_config(kind, preset)
    overrides = dict(overrides or {})
    if "guard_rules" in overrides:  # a list of rules, not a setting: it replaces the preset's
        config["guard_rules"] = copy.deepcopy(overrides.pop("guard_rules")) or []
    if "stall" in overrides:  # the stall-detection block: {"after_s" | "factor", "floor_s", "action", ...}
        config["stall"] = copy.deepcopy(overrides.pop("stall")) or {}
    if "human_eval" in overrides:  # the periodic human-evaluation schedule: {"every": N, ...} or {} (off)
        config["human_eval"] = copy.deepcopy(overrides.pop("human_eval")) or {}
    if config.get("human_eval"):
        problem = check_human_eval(config["human_eval"])
        if problem:
            errors["human_eval"] = f"Human evaluation schedule: {problem}."
    if config.get("stall"):
        try:
            StallConfig.from_dict(config["stall"])
        except StallConfigError as exc:
            errors["stall"] = f"Stall detection: {exc}."
    # typed, range-checked and advised by the schema, once
    apply_overrides(config, flatten_overrides(overrides), kind, backend, errors, warnings)
    _check_rules(config, errors)
    _check_between(kind, backend, config, errors, warnings)
    _check_context(kind, backend, config, ctx, errors, warnings)
    return config, errors, warnings


def _err(errors: dict, key: str, message: str) -> None:
    errors.setdefault(key, message)


LOCAL_SETTINGS = tuple(s for s in SETTINGS if s.section == "hp" and s.local)


def local_hp(kind: str, raw: dict | None) -> tuple[dict[str, Any], dict[str, str]]:
    """A job.json's hp for the local trainer, checked as the New job form checks it, in one pass: every local
    setting typed and range-checked by the schema (its default when absent: a job.json of an older app), then
    the checks between settings. Returns (hp, errors by key); keys of the other backend are left out."""
    hp, errors = parse_section(raw, LOCAL_SETTINGS, kind)
    if not errors:
        _check_between(kind, "local", {"hp": hp, "verl": {}}, errors, {})
    return hp, errors


def _check_between(kind: str, backend: str, config: dict, errors: dict, warnings: dict) -> None:
    """The checks between settings; a check that reads a value already refused (in `errors`) is skipped."""
    hp, verl = config["hp"], config["verl"]
    bad = set(errors)

    def ok(*keys: str) -> bool:  # skip checks that depend on a value already refused
        return not (bad & set(keys))

    if kind == "grpo":
        _check_grpo(hp, errors, ok)
    if ok("max_prompt_length", "max_response_length", "max_seq_len") and \
            hp["max_prompt_length"] + hp["max_response_length"] > hp["max_seq_len"]:
        _err(errors, "max_seq_len",
             f"Max sequence length {hp['max_seq_len']} cannot hold max prompt length {hp['max_prompt_length']} "
             f"+ max response length {hp['max_response_length']} = "
             f"{hp['max_prompt_length'] + hp['max_response_length']}.")
    lora = hp.get("lora") or {}
    if ok("lora.alpha", "lora.rank") and lora.get("rank", 0) > 0 and lora.get("alpha", 0) <= 0:
        _err(errors, "lora.alpha", "LoRA alpha must be above 0.")
    if ok("lora.targets") and lora.get("rank", 0) > 0 and not str(lora.get("targets", "")).strip():
        _err(errors, "lora.targets", "Name the LoRA target modules (or all-linear).")
    _check_batches(kind, backend, hp, verl, errors, ok)
    if backend == "verl":
        _check_verl(kind, hp, verl, errors, warnings, ok)


def _check_rules(config: dict, errors: dict) -> None:
    """The run-health rules, in one place (training.guard_rules); a rule that restores or branches needs
    checkpoints. Errors are keyed "guard_rules.<rule>" when they name one rule, else "guard_rules"."""
    if not config.get("guard_rules"):
        return
    try:
        rules = parse_rules(config["guard_rules"])
    except RuleConfigError as exc:
        errors["guard_rules"] = f"Guard rules: {exc}."
        return
    for rule in rules:
        if rule.enabled and rule.action in (RESTORE, BRANCH) and not config["hp"].get("save_freq"):
            _err(errors, f"guard_rules.{rule.name}", f"Rule {rule.name} would {rule.action} a checkpoint, but this "
                                                     "run saves none: set a save frequency, or choose warn or stop.")


def _check_grpo(hp: dict, errors: dict, ok) -> None:
    if ok("group_size") and hp["group_size"] < 2:
        _err(errors, "group_size", "GRPO needs a group size n of at least 2 (it compares the samples of one prompt), "
                                   f"got {hp['group_size']}.")


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
    if backend == "verl" and hp.get("device") != "cpu":
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


def _check_verl(kind: str, hp: dict, verl: dict, errors: dict, warnings: dict, ok) -> None:
    if kind == "reward_model":
        _err(errors, "backend", "Reward-model training runs on the local backend; VERL trains policies.")
    if kind == "distill" and ok("distill_mode") and hp["distill_mode"] != "on_policy":
        _err(errors, "distill_mode", "VERL only does on-policy distillation: choose on_policy, or the local backend.")
    _check_engines(hp, verl, errors, warnings, ok)
    if ok("verl.tensor_model_parallel_size", "verl.n_gpus_per_node") and verl["tensor_model_parallel_size"] >= 1 \
            and verl["n_gpus_per_node"] % verl["tensor_model_parallel_size"]:
        _err(errors, "verl.tensor_model_parallel_size",
             f"Tensor parallel size {verl['tensor_model_parallel_size']} must divide the "
             f"{verl['n_gpus_per_node']} GPUs per node.")
    if kind == "distill" and ok("verl.n_gpus_per_node", "device") and hp["device"] != "cpu" \
            and verl["n_gpus_per_node"] < 2:
        _err(errors, "verl.n_gpus_per_node", "On-policy distillation on VERL needs at least 2 GPUs per node "
                                             "(one pool for the student, one for the teacher).")
    if ok("lora.rank") and (hp.get("lora") or {}).get("rank", 0) > MAX_LORA_RANK:
        _err(errors, "lora.rank", f"vLLM accepts LoRA ranks up to {MAX_LORA_RANK}.")
    if kind == "distill" and ok("device", "distill_loss") and hp["device"] == "cpu" \
            and hp.get("distill_loss") == "forward_kl_topk":
        _err(errors, "distill_loss", "The top-k forward KL needs the teacher's top-k log-probs, which VERL takes "
                                     "only from vLLM or SGLang (GPU). On CPU choose a per-token loss: k3, "
                                     "low_var_kl, k2, mse or abs.")


def _check_engines(hp: dict, verl: dict, errors: dict, warnings: dict, ok) -> None:
    """Strategy × rollout engine × device: what VERL can run where."""
    if not ok("device", "verl.strategy", "verl.rollout_engine"):
        return
    device, strategy, engine = hp["device"], verl["strategy"], verl["rollout_engine"]
    names = {"vllm": "vLLM", "sglang": "SGLang"}
    rank = (hp.get("lora") or {}).get("rank", 0)
    if strategy == "megatron" and ok("lora.rank") and rank > 0:
        _err(errors, "lora.rank", "LoRA here names Hugging Face modules, which Megatron does not use: set the rank "
                                  "to 0 for Megatron, or choose FSDP/FSDP2 for LoRA.")
    if device == "cpu":
        # VERL's trainer on CPU (training.verl_cpu): a rehearsal with a tiny model on one machine.
        if ok("lora.rank") and rank > 0:
            _err(errors, "lora.rank", "LoRA needs a GPU on VERL: the CPU rollout syncs full weights only. "
                                      "Set the rank to 0 to rehearse on CPU.")
        if ok("verl.nnodes") and verl["nnodes"] != 1:
            warnings["verl.nnodes"] = (f"{verl['nnodes']} nodes on CPU: the job goes to the Ray cluster named by the "
                                       "worker's RAY_ADDRESS, one data-parallel worker per node (gloo).")
        if strategy == "megatron":
            _err(errors, "verl.strategy", "Megatron needs GPUs: on device cpu choose FSDP2, or set device to cuda.")
        elif strategy != "fsdp2":
            _err(errors, "verl.strategy", "VERL trains on CPU with FSDP2 (gloo): choose fsdp2, or set device to cuda.")
        if engine in GPU_ENGINES:
            _err(errors, "verl.rollout_engine", f"{names[engine]} needs CUDA GPUs: on device cpu choose the CPU "
                                                "rollout (hf), or set device to cuda.")
    elif engine == "hf":
        _err(errors, "verl.rollout_engine", "The CPU rollout (hf) runs only with device cpu: choose vLLM or SGLang "
                                            "for GPU workers, or set device to cpu.")


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
                                      f"the trainer lowers it to {n_train} (one step per epoch).")
    if backend == "verl" and ctx.get("n_val_rows") == 0:
        _err(errors, "dataset_version", "VERL needs validation rows: this dataset version has none.")
    limit = ctx.get("model_context_length")
    if limit and "max_seq_len" not in errors and hp["max_seq_len"] > limit:
        _err(errors, "max_seq_len", f"Max sequence length {hp['max_seq_len']} is longer than the model's context "
                                    f"({limit} tokens, max_position_embeddings in its config.json).")
    if ctx.get("model_is_hub"):
        if backend == "local":
            _err(errors, "base_model", "A hub model needs a GPU worker with hub access (VERL backend); the local "
                                       "backend runs offline from a registered folder.")
        else:
            warnings["base_model"] = "This is a hub id: only GPU workers with hub access can load it."


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

