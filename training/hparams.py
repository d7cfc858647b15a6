"""A job's hyperparameters: their values, from the New job form's POST to the trainers, in one module. Pure Python.

The settings (type, default, range, advice, help, group, kinds, backends, VERL keys) are the table in
`training.settings_table`; this module does everything with a job's values, once:
- `resolve_config(kind, preset, overrides)` starts from a preset or a job's stored config (`training.presets`),
  types, range-checks and advises each override (`apply_overrides`), then runs the checks between settings (a VERL
  job's own last) and against the job's inputs; it returns `(config, errors, warnings)`: `config` = {"hp", "verl"}
  (job.json's blocks) plus what is declared per job: "guard_rules", "stall" and "human_eval"; `errors` /
  `warnings` = {key: message}, by setting key ("lora.rank", "guard_rules.<rule name>") or by input name
  ("reward_spec", "dataset_version", "backend") for the facts about the job's inputs passed in `context`.
  Overrides may be dotted keys, form names ("lora_rank") or nested dicts; strings (the CLI's --set) are coerced.
- `local_hp(kind, hp)`: a job.json's hp as the local trainer reads it, typed and checked the same way (`HpError`
  names the first refused key).
"""
from __future__ import annotations

import copy
import math
from typing import Any

from training.guard_rules import BRANCH, RESTORE, RuleConfigError, parse_rules
from training.jobconfig import check_human_eval
from training.presets import PRESETS, base_config, stored_config
from training.settings_table import (
    BACKENDS,
    BY_FORM_NAME,
    BY_KEY,
    GPU_ENGINES,
    KINDS,
    MAX_LORA_RANK,
    MAX_TEXT,
    POLICY_KINDS,
    ROLLOUT_ENGINES,
    SECTIONS,
    SETTINGS,
    Setting,
    defaults,
    value_of,
    verl_settings,
)
from training.stall import StallConfig, StallConfigError

__all__ = ["BACKENDS", "BY_FORM_NAME", "BY_KEY", "KINDS", "MAX_LORA_RANK", "POLICY_KINDS", "PRESETS", "ROLLOUT_ENGINES",
           "SECTIONS", "SETTINGS", "Setting", "base_config", "defaults", "value_of",
           "verl_settings"]  # the table's names, for those who read a job's values


# -- reading and writing a setting in a config ({"hp": {...}, "verl": {...}}) -------------------------------

def set_in(section: dict, path: list[str], value: Any) -> None:
    for p in path[:-1]:
        section = section.setdefault(p, {})
    section[path[-1]] = value


def _value_in(section: dict, s: Setting) -> Any:
    """The setting's value in one section of a config; its default when absent."""
    for p in s.path[:-1]:
        section = section.get(p)
        if not isinstance(section, dict):
            return copy.deepcopy(s.default)
    return section[s.path[-1]] if s.path[-1] in section else copy.deepcopy(s.default)


def apply_overrides(config: dict, overrides: dict[str, Any], kind: str, backend: str, errors: dict[str, str],
                    warnings: dict[str, str] | None = None) -> None:
    """The schema's one pass over a launch's settings: each override (flat key -> raw value) refused when unknown
    or not used by `backend`, else coerced by its type and set in `config`; then every setting of `kind` on
    `backend` checked against its range (a preset's, a stored job's or an override's value alike), and a valid but
    risky value given its advice in `warnings`. Errors go into `errors` by key; a key already there is not checked
    again."""
    for key, raw in overrides.items():
        setting = BY_KEY.get(key)
        if setting is None:
            errors[key] = f"Unknown setting {key!r}."
            continue
        if backend == "verl" and "verl" not in setting.backends:
            errors[key] = (f"{setting.label} is not used by VERL (it has no VERL setting): leave it out, "
                           "or choose the local backend.")
            continue
        try:
            value = coerce(setting, raw)
        except ValueError as exc:
            errors[key] = f"{setting.label}: {exc}."
            continue
        set_in(config[setting.section], setting.path, value)
    for s in SETTINGS:  # the ranges first: the checks between settings divide by some of these values
        if kind not in s.kinds or (s.section == "verl" and backend != "verl") or s.key in errors:
            continue
        section = config.get(s.section) or {}
        value = _value_in(section, s)
        message = range_error(s, value)
        if message:
            errors.setdefault(s.key, message)
        elif warnings is not None:
            note = advice_note(s, value)
            if note:
                warnings[s.key] = note


def parse_section(raw: dict | None, settings: tuple[Setting, ...],
                  kind: str | None = None) -> tuple[dict, dict[str, str]]:
    """One pass of the schema over a section's raw values (a job.json's hp): each setting's value (its default
    when absent) coerced by its type, then, given `kind`, the range of each setting of that kind checked.
    Returns (values, errors by key); the coercion errors come first."""
    raw = raw or {}
    out: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for s in settings:
        value = _value_in(raw, s)
        try:
            value = coerce(s, value)
        except ValueError as exc:
            errors[s.key] = str(exc)
        set_in(out, s.path, value)
    for s in settings if kind is not None else ():
        message = None if s.key in errors or kind not in s.kinds else range_error(s, _value_in(out, s))
        if message:
            errors[s.key] = message
    return out, errors


def coerce(setting: Setting, value: Any) -> Any:
    """Convert a raw value (maybe a string from the CLI) to the setting's type; ValueError with a message."""
    if isinstance(value, str):
        value = value.strip()
        if value.lower() in ("", "none", "null") and (setting.optional or value == ""):
            value = None
    if value is None:
        if setting.optional:
            return None
        raise ValueError("a value is required")
    t = setting.type
    if t == "bool":
        return _coerce_bool(value)
    if t in ("int", "float"):
        return _coerce_number(value, whole=t == "int")
    text = str(value)
    if t == "str" and len(text) > MAX_TEXT:
        raise ValueError(f"at most {MAX_TEXT} characters, got {len(text)}")
    if t == "choice" and text not in setting.choices:
        raise ValueError(f"must be one of {', '.join(setting.choices)}, not {text!r}")
    return text


def _coerce_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def _coerce_number(value: Any, whole: bool) -> int | float:
    what = "a whole number" if whole else "a number"
    if isinstance(value, bool):
        raise ValueError(f"expected {what}, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"expected {what}, got {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"expected a finite number, got {value!r}")
    if not whole:
        return number
    if number != int(number):
        raise ValueError(f"expected a whole number, got {value!r}")
    return int(number)


# -- one setting's value: range and advice ------------------------------------------------------------------

def range_error(s: Setting, value: Any) -> str | None:
    """The message when `value` is outside the setting's range (None and non-numbers pass)."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    low_bad = s.low is not None and (value <= s.low if s.low_open else value < s.low)
    high_bad = s.high is not None and (value >= s.high if s.high_open else value > s.high)
    if not (low_bad or high_bad):
        return None
    blank = " (or blank)" if s.optional else ""
    low, high, got = _num(s.low), _num(s.high), _num(value)
    if s.low is not None and s.high is not None:
        if low_bad and s.low == 0 and not s.low_open:
            return f"{s.label} cannot be negative, got {got}."
        if s.low_open and s.high_open:
            return f"{s.label} must be strictly between {low} and {high}{blank}, got {got}."
        if s.low_open or s.high_open:
            above = f"above {low}" if s.low_open else f"at least {low}"
            below = f"below {high}" if s.high_open else f"at most {high}"
            return f"{s.label} must be {above} and {below}{blank}, got {got}."
        return f"{s.label} must be between {low} and {high}{blank}, got {got}."
    if s.low is not None:
        bound = "above" if s.low_open else "at least"
        if s.low == 0 and not s.low_open:
            return f"{s.label} cannot be negative, got {got}."
        return f"{s.label} must be {bound} {low}{blank}, got {got}."
    bound = "below" if s.high_open else "at most"
    return f"{s.label} must be {bound} {high}{blank}, got {got}."


def _num(x: float | None) -> str:
    """A bound or value for people: whole numbers in full (2147483647, not 2.14748e+09)."""
    if x is None:
        return ""
    if float(x).is_integer() and abs(x) < 1e16:
        return str(int(x))
    return f"{x:g}"


def advice_note(s: Setting, value: Any) -> str | None:
    """The setting's warning for a valid but risky value (its `Advice`), or None."""
    a = s.advice
    if a is None or value is None:
        return None
    if value == 0:
        return f"{s.label} 0: {a.zero}"
    low, high = a.usual
    if low <= value <= high:
        return None
    return f"{s.label} {value:g} is outside the usual {low:g}–{high:g}: {a.below if value < low else a.above}."


# -- a job's config: presets, stored config, overrides, the checks between settings --------------------------

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
    config = stored_config(base) if base is not None else base_config(kind, preset)
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
    ok = _unrefused(errors)
    _check_between(kind, backend, config, errors, warnings, ok)
    _check_context(kind, backend, config, ctx, errors, warnings)
    if backend == "verl":  # VERL's own checks, last
        _check_verl(kind, config["hp"], config["verl"], errors, warnings, ok)
    return config, errors, warnings


def _err(errors: dict, key: str, message: str) -> None:
    errors.setdefault(key, message)


LOCAL_SETTINGS = tuple(s for s in SETTINGS if s.section == "hp" and s.local)


class HpError(ValueError):
    """A job.json's hp the local trainer refuses; the message is "hp.<key>: <the form's message>"."""


def local_hp(kind: str, raw: dict | None) -> dict[str, Any]:
    """A job.json's hp for the local trainer, checked as the New job form checks it, in one pass: every local
    setting typed and range-checked by the schema (its default when absent: a job.json of an older app), then
    the checks between settings. Returns the hp (keys of the other backend left out); HpError names the first
    refused key."""
    hp, errors = parse_section(raw, LOCAL_SETTINGS, kind)
    if not errors:
        _check_between(kind, "local", {"hp": hp, "verl": {}}, errors, {}, _unrefused(errors))
    if errors:
        key, message = next(iter(errors.items()))
        raise HpError(f"hp.{key}: {message}")
    return hp


def _unrefused(errors: dict):
    """ok(*keys): none of these settings is refused yet (a check that reads a refused value is skipped)."""
    bad = set(errors)
    return lambda *keys: not (bad & set(keys))


def _check_between(kind: str, backend: str, config: dict, errors: dict, warnings: dict, ok) -> None:
    """The checks between settings; `ok` skips a check that reads a value already refused."""
    hp, verl = config["hp"], config["verl"]
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


def _check_verl(kind: str, hp: dict, verl: dict, errors: dict, warnings: dict, ok) -> None:
    """The checks between settings that only a VERL job has (strategy x rollout engine x device, GPUs, LoRA on
    vLLM); `ok(*keys)` is False when one of them was refused."""
    if kind == "reward_model":
        _err(errors, "backend", "Reward-model training runs on the local backend; VERL trains policies.")
    if kind == "distill" and ok("distill_mode") and hp["distill_mode"] != "on_policy":
        _err(errors, "distill_mode", "VERL only does on-policy distillation: choose on_policy, or the local backend.")
    _engines(hp, verl, errors, warnings, ok)
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
    if ok("device", "verl.reuse_rollout_logprobs") and verl.get("reuse_rollout_logprobs") and hp["device"] != "cpu":
        warnings["verl.reuse_rollout_logprobs"] = (
            "The GPU rollout samples with its own engine and precision: its log-probs are not the trainer's, so "
            "reusing them as the old policy's makes the update off-policy by that gap (VERL's bypass mode).")
    if kind == "distill" and ok("device", "distill_loss") and hp["device"] == "cpu" \
            and hp.get("distill_loss") == "forward_kl_topk":
        _err(errors, "distill_loss", "The top-k forward KL needs the teacher's top-k log-probs, which VERL takes "
                                     "only from vLLM or SGLang (GPU). On CPU choose a per-token loss: k3, "
                                     "low_var_kl, k2, mse or abs.")


def _engines(hp: dict, verl: dict, errors: dict, warnings: dict, ok) -> None:
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
