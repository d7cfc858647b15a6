"""The table of a job's hyperparameters, defined once: pure Python, no Django, no torch.

The table, its converters and `verl_settings` (the one pass that VERL's override list makes over a job spec,
beside the converters it calls); `training.hparams` does everything else with a job's values (types, ranges,
advice, presets and overrides, the checks between settings). One `Setting` per setting: type, default, range or
choices, advice, help, form group, the job kinds and backends that offer it, and how it reaches VERL. The New job
form, the web app's validation, the presets, the local trainer's config and the VERL override list are all built
from `SETTINGS`.

How a setting reaches VERL (`Setting.verl`):
- `Verl(paths)`: the value goes unchanged to each Hydra path of VERL 0.9.1's ppo_trainer.yaml;
- `Verl(paths, convert=fn)`: `fn(value, spec)` returns the (path, value) pairs (unit changes, a
  switch that goes with the value, nothing at all to keep VERL's default);
- `Verl(paths, planned=True)`: several settings decide the value together (batch sizes over the
  GPUs, the teacher's GPU pool), so `training.backends.verl_overrides` plans it.
A setting with `app=True` is acted on by the app itself on every backend (checkpoint and rollout-store
retention, the reward scoring budget). The run-health rules (the KL guard among them) are not settings: they
are `training.guard_rules` declarations in the job's config. A setting without either is not offered for VERL.
"""
from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

KINDS = ("grpo", "distill", "reward_model")
POLICY_KINDS = ("grpo", "distill")
BACKENDS = ("local", "verl")
SECTIONS = ("hp", "verl")
STRATEGIES = ("fsdp", "fsdp2", "megatron")
ROLLOUT_ENGINES = ("vllm", "sglang", "hf")  # hf: the CPU rollout
GPU_ENGINES = ("vllm", "sglang")
# Upper bounds of what makes sense (a value above one is a typo, and would only fail later, on a worker).
MAX_BATCH = 65_536  # prompts (or sequences) per step
MAX_STEPS = 10_000_000
MAX_TOKENS = 1_048_576  # the longest context of any model a job may name
MAX_TEXT = 1000  # characters of a text setting
# Largest LoRA rank vLLM accepts (verl/workers/rollout/vllm_rollout/utils.py: MaxLoRARanks).
MAX_LORA_RANK = 512

Pairs = list[tuple[str, Any]]


@dataclass(frozen=True)
class Verl:
    paths: tuple[str, ...]
    convert: Callable[[Any, dict], Pairs] | None = None
    planned: bool = False


@dataclass(frozen=True)
class Advice:
    """A warning for a valid but risky value (it never blocks): at 0, or outside the usual range."""
    usual: tuple[float, float]
    zero: str  # what 0 means
    below: str  # the risk below the usual range
    above: str  # the risk above it


@dataclass(frozen=True)
class Setting:
    key: str  # "lr", "lora.rank", "verl.rollout_engine"
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
    advice: Advice | None = None  # a warning for a valid but risky value (never blocks)

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
        return "verl" if head == "verl" else "hp"

    @property
    def path(self) -> list[str]:
        parts = self.key.split(".")
        return parts[1:] if self.section != "hp" else parts


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


KL_ADVICE = Advice(usual=(0.01, 0.05), below="the policy may drift and hack the reward", above="learning may stall",
                   zero="no KL term and no reference model; nothing keeps the policy near the reference, so reward "
                        "hacking is likely.")


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
    S(key="lr", type="float", default=1e-6, label="Learning rate", group="Optimisation", low=0, high=1, low_open=True,
      high_open=True, verl=Verl((f"{ACTOR}.optim.lr",))),
    S(key="batch_size", type="int", default=64, label="Batch size (prompts per step)", group="Optimisation",
      help="GRPO samples group_size responses for each prompt, so a step sees batch_size × group_size sequences.",
      low=1, high=MAX_BATCH, verl=Verl(("data.train_batch_size",), planned=True)),
    S(key="mini_batch_size", type="int", default=None, label="Mini batch (prompts per update)", group="Optimisation",
      help="Blank = the whole batch in one update. Must divide the batch size.", optional=True, low=1, high=MAX_BATCH,
      verl=Verl((f"{ACTOR}.ppo_mini_batch_size",), planned=True)),
    S(key="micro_batch_size", type="int", default=None, label="Micro batch (sequences per forward pass)",
      group="Optimisation", help="Blank = automatic. Lower it when memory is short; on VERL it counts per GPU.",
      optional=True, low=1, high=MAX_BATCH,
      verl=Verl((f"{ACTOR}.ppo_micro_batch_size_per_gpu", f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu",
                 "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"), planned=True)),
    S(key="epochs", type="int", default=3, label="Epochs", group="Optimisation", low=1, high=10_000,
      help="With max steps set, the data is gone through as often as the steps need (on both backends).",
      verl=Verl(("trainer.total_epochs",), planned=True)),
    S(key="max_steps", type="int", default=None, label="Max steps", group="Optimisation",
      help="Blank = run all epochs.", optional=True, low=1, high=MAX_STEPS,
      verl=Verl(("trainer.total_training_steps",), convert=_unless_none("trainer.total_training_steps"))),
    S(key="weight_decay", type="float", default=0.0, label="Weight decay", group="Optimisation", low=0, high=1,
      verl=Verl((f"{ACTOR}.optim.weight_decay",))),
    S(key="warmup_steps", type="int", default=0, label="Warm-up steps", group="Optimisation",
      help="Linear learning-rate warm-up from 0.", low=0, high=MAX_STEPS,
      verl=Verl((f"{ACTOR}.optim.lr_warmup_steps",))),
    S(key="grad_clip", type="float", default=1.0, label="Gradient clipping (max norm)", group="Optimisation", low=0,
      high=1e4, low_open=True, verl=Verl((f"{ACTOR}.optim.clip_grad",))),
    S(key="seed", type="int", default=1, label="Seed", group="Optimisation", low=0, high=2**31 - 1,
      verl=Verl(("data.seed", f"{ROLLOUT}.seed"))),
    S(key="max_prompt_length", type="int", default=512, label="Max prompt length (tokens)", group="Lengths",
      help="Longer prompts are left out of training on both backends; the launch review counts them with the "
      "model's tokenizer, and refuses a launch in which every prompt is longer.", low=1, high=MAX_TOKENS,
      verl=Verl(("data.max_prompt_length",))),
    S(key="overlong_prompt_warn", type="float", default=0.05, label="Warn above this share of too-long prompts",
      group="Lengths", help="The launch review warns when more prompts than this share (0–1) are longer than the "
      "max prompt length.", low=0, high=1, app=True),
    S(key="max_response_length", type="int", default=1536, label="Max response length (tokens)", group="Lengths",
      low=1, high=MAX_TOKENS, verl=Verl(("data.max_response_length",))),
    S(key="max_seq_len", type="int", default=2048, label="Max sequence length (tokens)", group="Lengths",
      help="Must hold max prompt length + max response length.", low=1, high=MAX_TOKENS,
      verl=Verl((f"{ROLLOUT}.max_model_len",))),
    S(key="group_size", type="int", default=4, label="Group size n (samples per prompt)", group="GRPO",
      help="GRPO needs at least 2.", low=1, high=1024, kinds=("grpo",), verl=Verl((f"{ROLLOUT}.n",), planned=True)),
    S(key="kl_coef", type="float", default=0.02, label="KL coefficient", group="GRPO",
      help="Recommended range 0.01–0.05; 0 turns the KL term and the reference model off.", low=0, high=10,
      kinds=("grpo",), advice=KL_ADVICE, verl=Verl((f"{ACTOR}.kl_loss_coef",), convert=_kl_coef)),
    S(key="kl_loss_type", type="choice", default="low_var_kl", label="KL estimator", group="GRPO",
      choices=("low_var_kl", "kl", "abs", "mse"), kinds=("grpo",), verl=Verl((f"{ACTOR}.kl_loss_type",))),
    S(key="temperature", type="float", default=1.0, label="Sampling temperature", group="GRPO", low=0, high=10,
      low_open=True, kinds=POLICY_KINDS, verl=Verl((f"{ROLLOUT}.temperature",))),
    S(key="clip_ratio", type="float", default=0.2, label="Clip ratio", group="GRPO", low=0, high=1, low_open=True,
      high_open=True, kinds=("grpo",), verl=Verl((f"{ACTOR}.clip_ratio_low", f"{ACTOR}.clip_ratio_high"))),
    S(key="loss_agg_mode", type="choice", default="token-mean", label="Loss aggregation", group="GRPO",
      choices=("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"), kinds=("grpo",),
      verl=Verl((f"{ACTOR}.loss_agg_mode",))),
    S(key="entropy_coeff", type="float", default=0.0, label="Entropy bonus", group="GRPO", low=0, high=1,
      kinds=("grpo",), verl=Verl((f"{ACTOR}.entropy_coeff",))),
    S(key="distill_temperature", type="float", default=2.0, label="Distillation temperature T", group="Distillation",
      low=0, high=100, low_open=True, kinds=("distill",)),
    S(key="distill_alpha", type="float", default=0.5, label="Distillation alpha (weight of the CE term)",
      group="Distillation", help="loss = alpha·CE + (1 − alpha)·T²·KL(teacher_T ‖ student_T)", low=0, high=1,
      kinds=("distill",)),
    S(key="distill_mode", type="choice", default="offline", label="Distillation mode", group="Distillation",
      help="offline: dataset responses; on_policy: the student samples, the teacher scores (VERL needs on_policy).",
      choices=("offline", "on_policy"), kinds=("distill",), verl=Verl(("distillation.enabled",), planned=True)),
    S(key="distill_loss", type="choice", default="forward_kl_topk", label="On-policy distillation loss (VERL)",
      group="Distillation", choices=("forward_kl_topk", "k3", "low_var_kl", "k2", "mse", "abs"), kinds=("distill",),
      local=False, verl=Verl(("distillation.distillation_loss.loss_mode",))),
    S(key="lora.rank", type="int", default=0, label="LoRA rank", group="LoRA", help="0 = full fine-tuning.", low=0,
      high=4096, verl=Verl((f"{MODEL}.lora_rank",), convert=_lora_rank)),
    S(key="lora.alpha", type="int", default=16, label="LoRA alpha", group="LoRA", low=0, high=65_536,
      verl=Verl((f"{MODEL}.lora_alpha",), convert=_lora_alpha)),
    S(key="lora.targets", type="str", default="all-linear", label="LoRA target modules", group="LoRA",
      help="all-linear, or a comma-separated list.", verl=Verl((f"{MODEL}.target_modules",), convert=_lora_targets)),
    S(key="save_freq", type="int", default=10, label="Save a checkpoint every N steps", group="Checkpoints",
      help="0 = never.", low=0, high=MAX_STEPS,
      verl=Verl(("trainer.save_freq",), convert=_every("trainer.save_freq"))),
    S(key="test_freq", type="int", default=5, label="Validate every N steps", group="Checkpoints", help="0 = never.",
      low=0, high=MAX_STEPS, verl=Verl(("trainer.test_freq",), convert=_every("trainer.test_freq"))),
    S(key="keep_last_k", type="int", default=3, label="Keep the last K checkpoints", group="Checkpoints",
      help="Blank = keep all.", optional=True, low=1, high=10_000, app=True),
    S(key="rollout_keep_last", type="int", default=50, label="Rollout store: keep the last N steps",
      group="Rollout store",
      help="Every step's samples are kept for browsing and re-scoring; older ones are pruned. Blank = keep all.",
      optional=True, low=1, high=MAX_STEPS, kinds=POLICY_KINDS, app=True),
    S(key="rollout_keep_every", type="int", default=10, label="Rollout store: and every k-th older step",
      group="Rollout store", help="Blank = none of the older steps.", optional=True, low=1, high=MAX_STEPS,
      kinds=POLICY_KINDS, app=True),
    S(key="rollout_max_mb", type="float", default=512.0, label="Rollout store: at most (MB)", group="Rollout store",
      help="The oldest kept steps go first when the store is larger; the newest step always stays. Blank = no cap.",
      optional=True, low=0, high=1_048_576, low_open=True, kinds=POLICY_KINDS, app=True),
    S(key="device", type="choice", default="auto", label="Device", group="Runtime",
      help="VERL on cpu: FSDP2 with the CPU rollout (hf).", choices=("auto", "cpu", "cuda"),
      verl=Verl(("trainer.device",), convert=_device)),
    S(key="dtype", type="choice", default="auto", label="Precision", group="Runtime",
      help="auto: float32 on CPU, bfloat16 on GPUs.", choices=("auto", "float32", "bfloat16"),
      verl=Verl((f"{ROLLOUT}.dtype",), convert=_dtype)),
    S(key="reward_workers", type="int", default=None, label="Reward scoring processes", group="Runtime",
      help="Sandboxes that score a batch's rewards at once: the job's CPU budget for reward code. Blank = min(CPU "
      "cores, 4). On VERL they are shared out over VERL's reward workers (at most 4, one sandbox each or more).",
      optional=True, low=1, high=64, kinds=POLICY_KINDS, app=True),
    S(key="verl.strategy", type="choice", default="fsdp", label="Training strategy", group="VERL",
      help="FSDP or FSDP2 on GPUs or CPU (CPU: FSDP2); Megatron needs GPUs.", choices=STRATEGIES, kinds=POLICY_KINDS,
      local=False, verl=Verl((f"{ACTOR}.strategy",))),
    S(key="verl.rollout_engine", type="choice", default="vllm", label="Rollout engine", group="VERL",
      help="vLLM or SGLang on GPU workers; hf is the CPU rollout (device cpu).", choices=ROLLOUT_ENGINES,
      kinds=POLICY_KINDS, local=False, verl=Verl((f"{ROLLOUT}.name",))),
    S(key="verl.n_gpus_per_node", type="int", default=1, label="GPUs per node", group="VERL", low=1, high=64,
      kinds=POLICY_KINDS, local=False, verl=Verl(("trainer.n_gpus_per_node",), planned=True)),
    S(key="verl.nnodes", type="int", default=1, label="Nodes", group="VERL",
      help="More than 1 submits to the Ray cluster at RAY_ADDRESS.", low=1, high=1024, kinds=POLICY_KINDS,
      local=False, verl=Verl(("trainer.nnodes",), planned=True)),
    S(key="verl.tensor_model_parallel_size", type="int", default=1, label="Rollout tensor parallel size",
      group="VERL", low=1, high=64, kinds=POLICY_KINDS, local=False,
      verl=Verl((f"{ROLLOUT}.tensor_model_parallel_size",))),
    S(key="verl.gpu_memory_utilization", type="float", default=0.4, label="Rollout GPU memory fraction", group="VERL",
      low=0, high=1, low_open=True, kinds=POLICY_KINDS, local=False,
      verl=Verl((f"{ROLLOUT}.gpu_memory_utilization",))),
    # VERL 0.9's default trainer; VERL says it will remove the legacy one, which stays a choice until then.
    S(key="verl.use_v1", type="bool", default=True, label="VERL V1 trainer", group="VERL",
      help="VERL's default trainer. Untick for VERL's legacy trainer (deprecated by VERL).",
      kinds=POLICY_KINDS, local=False, verl=Verl(("trainer.use_v1",))),
    # The local backend never runs a separate pass: its old log-probs are the update's own, detached.
    S(key="verl.reuse_rollout_logprobs", type="bool", default=False, label="Reuse the rollout's log-probs",
      group="VERL", help="VERL's bypass mode: the rollout's sampling log-probs are the old policy's, which skips a "
      "forward pass over the batch. Sound where the rollout samples with the trainer's weights and precision (the "
      "CPU rollout: they agree to ~1e-4); VERL then logs no actor/entropy.",
      kinds=("grpo",), local=False, verl=Verl(("algorithm.rollout_correction.bypass_mode",))),
)
BY_KEY: dict[str, Setting] = {s.key: s for s in SETTINGS}
BY_FORM_NAME: dict[str, Setting] = {s.form_name: s for s in SETTINGS}


def defaults(section: str) -> dict[str, Any]:
    """The defaults of one section, nested like job.json ("lora" is a dict in "hp")."""
    out: dict[str, Any] = {}
    for s in SETTINGS:
        if s.section == section:
            nest = out
            for p in s.path[:-1]:
                nest = nest.setdefault(p, {})
            nest[s.path[-1]] = copy.deepcopy(s.default)
    return out


def value_of(config: dict, key: str) -> Any:
    """A setting's value in a config or job spec ({"hp": ..., "verl": ...}); its default when absent."""
    s = BY_KEY[key]
    section = config.get(s.section) or {}
    for p in s.path[:-1]:
        section = section.get(p)
        if not isinstance(section, dict):
            return copy.deepcopy(s.default)
    return section[s.path[-1]] if s.path[-1] in section else copy.deepcopy(s.default)


def verl_settings(spec: dict) -> tuple[dict[str, Any], tuple[tuple[Setting, Any, Pairs], ...]]:
    """One pass over a job spec for VERL: each setting's value by key (its default when absent), and each setting VERL
    takes for the spec's kind with its value and the (Hydra path, value) pairs it adds (none if planned; ValueError).
    Beside the converters, so that the pass stays in this module."""
    values, kind, table = {s.key: value_of(spec, s.key) for s in SETTINGS}, spec.get("kind", "grpo"), []
    for s in SETTINGS:
        if s.verl is None or not s.offered(kind, "verl"):
            continue
        m, value = s.verl, values[s.key]
        pairs = [] if m.planned else m.convert(value, spec) if m.convert else [(p, value) for p in m.paths]
        table.append((s, value, pairs))
    return values, tuple(table)
