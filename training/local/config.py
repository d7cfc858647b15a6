"""job.json -> a validated Job for the local trainers; bad values fail with a clear message."""
from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from training import hparams
from training.jobspec import JobSpecError, read_spec

KINDS = hparams.KINDS
LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
KL_TYPES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")


class JobError(ValueError):
    """A job the local backend refuses to run; the message names the offending field."""


DEFAULTS = hparams.defaults("hp")


def _d(key: str) -> Any:
    return field(default_factory=lambda: copy.deepcopy(DEFAULTS[key])) if isinstance(DEFAULTS[key], dict) \
        else DEFAULTS[key]


@dataclass
class HParams:
    """The settings of `training.hparams` the local trainers read (defaults from there), plus internal knobs."""

    lr: float = _d("lr")
    kl_coef: float = _d("kl_coef")
    kl_loss_type: str = _d("kl_loss_type")
    batch_size: int = _d("batch_size")
    epochs: int = _d("epochs")
    max_steps: int | None = _d("max_steps")
    max_prompt_length: int = _d("max_prompt_length")
    max_response_length: int = _d("max_response_length")
    max_seq_len: int = _d("max_seq_len")
    group_size: int = _d("group_size")
    temperature: float = _d("temperature")
    clip_ratio: float = _d("clip_ratio")
    clip_ratio_high: float | None = None
    loss_agg_mode: str = _d("loss_agg_mode")
    entropy_coeff: float = _d("entropy_coeff")
    distill_temperature: float = _d("distill_temperature")
    distill_alpha: float = _d("distill_alpha")
    distill_mode: str = _d("distill_mode")
    lora: dict = _d("lora")
    save_freq: int = _d("save_freq")
    test_freq: int = _d("test_freq")
    val_before_train: bool = True
    seed: int = _d("seed")
    device: str = _d("device")
    dtype: str = _d("dtype")
    keep_last_k: int | None = _d("keep_last_k")
    rollout_keep_last: int | None = _d("rollout_keep_last")
    rollout_keep_every: int | None = _d("rollout_keep_every")
    rollout_max_mb: float | None = _d("rollout_max_mb")
    micro_batch_size: int | None = _d("micro_batch_size")  # sequences per forward pass; None = whole batch
    weight_decay: float = _d("weight_decay")
    warmup_steps: int = _d("warmup_steps")
    grad_clip: float = _d("grad_clip")
    reward_workers: int | None = _d("reward_workers")  # sandboxes scoring at once; None = min(CPUs, 4)
    val_max_rows: int | None = None
    tie_tolerance: float = 1e-6


@dataclass
class Job:
    run_dir: Path
    kind: str
    model_path: Path
    train_path: Path
    val_path: Path | None
    hp: HParams
    teacher_path: Path | None = None
    reward: dict | None = None
    resume_from: Path | None = None
    sandbox: dict = field(default_factory=dict)
    raw: dict = field(default_factory=dict)

    @property
    def lora_rank(self) -> int:
        return int(self.hp.lora.get("rank", 0) or 0)


_BLANK_OK = ("max_steps", "keep_last_k", "micro_batch_size", "clip_ratio_high", "val_max_rows", "rollout_keep_last",
             "rollout_keep_every", "rollout_max_mb", "reward_workers")  # None is a value here ("keep all", "automatic")


def _hparams(raw: dict[str, Any]) -> HParams:
    known = {f.name: f for f in fields(HParams)}
    values: dict[str, Any] = {}
    for key, val in raw.items():
        if key not in known or val is None and key not in _BLANK_OK:
            continue  # unknown keys belong to the other backend; None means "default"
        default = getattr(HParams(), key)
        try:
            if isinstance(default, bool):
                val = bool(val)
            elif isinstance(default, int) and val is not None:
                if float(val) != int(float(val)):
                    raise ValueError
                val = int(float(val))
            elif isinstance(default, float) and val is not None:
                val = float(val)
        except (TypeError, ValueError):
            raise JobError(f"hp.{key} must be a number, got {val!r}") from None
        values[key] = val
    return HParams(**values)


def _path(run_dir: Path, value: Any, what: str) -> Path:
    if not value or not isinstance(value, str):
        raise JobError(f"{what} is missing from job.json")
    p = Path(value)
    return p if p.is_absolute() else run_dir / p


def load_job(run_dir: str | Path) -> Job:
    """Read and validate `<run_dir>/job.json`."""
    run_dir = Path(run_dir).resolve()
    try:
        spec = read_spec(run_dir)
    except JobSpecError as exc:
        raise JobError(str(exc)) from None
    raw = spec.to_dict()
    job = Job(
        run_dir=run_dir, kind=spec.kind,
        model_path=_path(run_dir, spec.model.path, "model.path"),
        train_path=_path(run_dir, spec.data.train, "data.train"),
        val_path=_path(run_dir, spec.data.val, "data.val") if spec.data.val else None,
        hp=_hparams(spec.hp),
        teacher_path=_path(run_dir, spec.teacher.path, "teacher.path") if spec.teacher else None,
        reward=raw["reward"] if spec.reward.components else None,
        resume_from=Path(spec.resume_from) if spec.resume_from else None,
        sandbox=spec.sandbox, raw=raw,
    )
    validate(job)
    return job


def validate(job: Job) -> None:
    """Static checks that need no model or data; data-dependent ones live with the trainers."""
    hp = job.hp
    if not (job.model_path / "config.json").exists():
        raise JobError(f"model.path {job.model_path} is not an HF model folder (no config.json)")
    if not job.train_path.is_file():
        raise JobError(f"training data {job.train_path} does not exist")
    if job.val_path is not None and not job.val_path.is_file():
        raise JobError(f"validation data {job.val_path} does not exist")
    if hp.lr <= 0:
        raise JobError(f"hp.lr must be > 0, got {hp.lr}")
    if hp.batch_size < 1:
        raise JobError(f"hp.batch_size must be >= 1, got {hp.batch_size}")
    if hp.max_steps is not None and hp.max_steps < 1:
        raise JobError(f"hp.max_steps must be >= 1 or null, got {hp.max_steps}")
    if hp.max_steps is None and hp.epochs < 1:
        raise JobError(f"hp.epochs must be >= 1, got {hp.epochs}")
    if hp.max_prompt_length < 1 or hp.max_response_length < 1:
        raise JobError("hp.max_prompt_length and hp.max_response_length must be >= 1")
    if hp.max_prompt_length + hp.max_response_length > hp.max_seq_len:
        raise JobError(f"hp.max_prompt_length ({hp.max_prompt_length}) + hp.max_response_length "
                       f"({hp.max_response_length}) exceeds hp.max_seq_len ({hp.max_seq_len})")
    if hp.temperature <= 0:
        raise JobError(f"hp.temperature must be > 0, got {hp.temperature}")
    if job.lora_rank < 0:
        raise JobError(f"hp.lora.rank must be >= 0, got {job.lora_rank}")
    rows_per_step = hp.batch_size * (hp.group_size if job.kind == "grpo" else 1)
    if hp.micro_batch_size is not None and (hp.micro_batch_size < 1 or rows_per_step % hp.micro_batch_size):
        unit = "batch_size * group_size" if job.kind == "grpo" else "batch_size"
        raise JobError(f"{unit} = {rows_per_step} is not divisible by hp.micro_batch_size = {hp.micro_batch_size}")
    if job.kind == "grpo":
        if hp.group_size < 2:
            raise JobError(f"GRPO needs hp.group_size >= 2 (advantages compare samples of one prompt), "
                           f"got {hp.group_size}")
        if hp.loss_agg_mode not in LOSS_AGG_MODES:
            raise JobError(f"hp.loss_agg_mode must be one of {LOSS_AGG_MODES}, not {hp.loss_agg_mode!r}")
        if hp.kl_loss_type not in KL_TYPES:
            raise JobError(f"hp.kl_loss_type must be one of {KL_TYPES}, not {hp.kl_loss_type!r}")
        if not 0 < hp.clip_ratio < 1:
            raise JobError(f"hp.clip_ratio must be in (0, 1), got {hp.clip_ratio}")
        if hp.kl_coef < 0:
            raise JobError(f"hp.kl_coef must be >= 0, got {hp.kl_coef}")
        if not job.reward:
            raise JobError("a GRPO job needs a reward block with at least one component")
    if job.kind == "distill":
        if job.teacher_path is None:
            raise JobError("a distillation job needs teacher.path")
        if not (job.teacher_path / "config.json").exists():
            raise JobError(f"teacher.path {job.teacher_path} is not an HF model folder")
        if hp.distill_mode not in ("offline", "on_policy"):
            raise JobError(f"hp.distill_mode must be 'offline' or 'on_policy', not {hp.distill_mode!r}")
        if not 0 <= hp.distill_alpha <= 1:
            raise JobError(f"hp.distill_alpha must be in [0, 1], got {hp.distill_alpha}")
        if hp.distill_temperature <= 0:
            raise JobError(f"hp.distill_temperature must be > 0, got {hp.distill_temperature}")
    for s in hparams.SETTINGS:  # the schema's ranges for everything else this trainer reads
        if s.section == "hp" and s.local and job.kind in s.kinds:
            value = hp.lora.get(s.path[-1]) if s.key.startswith("lora.") else getattr(hp, s.key, None)
            message = s.range_error(value)
            if message:
                raise JobError(f"hp.{s.key}: {message}")
    if job.resume_from is not None:
        if not job.resume_from.is_dir() or not job.resume_from.name.startswith("global_step_"):
            raise JobError(f"resume_from must be an existing global_step_N folder, got {job.resume_from}")
        if not (job.resume_from / "trainer_state.pt").exists():
            raise JobError(f"{job.resume_from} is not a local-backend checkpoint (no trainer_state.pt)")
