"""job.json -> a validated Job for the local trainers; bad values fail with a clear message."""
from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

KINDS = ("grpo", "distill", "reward_model")
LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
KL_TYPES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")


class JobError(ValueError):
    """A job the local backend refuses to run; the message names the offending field."""


@dataclass
class HParams:
    lr: float = 1e-6
    kl_coef: float = 0.02
    kl_loss_type: str = "low_var_kl"
    batch_size: int = 64
    epochs: int = 1
    max_steps: int | None = None
    max_prompt_length: int = 512
    max_response_length: int = 512
    max_seq_len: int = 2048
    group_size: int = 4
    temperature: float = 1.0
    clip_ratio: float = 0.2
    clip_ratio_high: float | None = None
    loss_agg_mode: str = "token-mean"
    entropy_coeff: float = 0.0
    distill_temperature: float = 2.0
    distill_alpha: float = 0.5
    distill_mode: str = "offline"
    lora: dict = field(default_factory=lambda: {"rank": 0, "alpha": 16, "targets": "all-linear"})
    save_freq: int = 10
    test_freq: int = 5
    val_before_train: bool = True
    seed: int = 1
    device: str = "auto"
    dtype: str = "auto"
    keep_last_k: int | None = 3
    micro_batch_size: int | None = None  # sequences per forward pass; None = whole batch
    weight_decay: float = 0.0
    warmup_steps: int = 0
    grad_clip: float = 1.0
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


def _hparams(raw: dict[str, Any]) -> HParams:
    known = {f.name: f for f in fields(HParams)}
    values: dict[str, Any] = {}
    for key, val in raw.items():
        if key not in known or val is None and key not in ("max_steps", "keep_last_k", "micro_batch_size",
                                                           "clip_ratio_high", "val_max_rows"):
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
        raw = json.loads((run_dir / "job.json").read_text())
    except FileNotFoundError:
        raise JobError(f"no job.json in {run_dir}") from None
    except json.JSONDecodeError as exc:
        raise JobError(f"{run_dir / 'job.json'} is not valid JSON: {exc}") from None
    kind = raw.get("kind")
    if kind not in KINDS:
        raise JobError(f"job.kind must be one of {KINDS}, not {kind!r}")
    data = raw.get("data") or {}
    job = Job(
        run_dir=run_dir, kind=kind,
        model_path=_path(run_dir, (raw.get("model") or {}).get("path"), "model.path"),
        train_path=_path(run_dir, data.get("train"), "data.train"),
        val_path=_path(run_dir, data["val"], "data.val") if data.get("val") else None,
        hp=_hparams(raw.get("hp") or {}),
        teacher_path=_path(run_dir, raw["teacher"]["path"], "teacher.path") if (raw.get("teacher") or {}).get("path")
        else None,
        reward=raw.get("reward") or None,
        resume_from=Path(raw["resume_from"]) if raw.get("resume_from") else None,
        sandbox=raw.get("sandbox") or {}, raw=raw,
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
    if job.resume_from is not None:
        if not job.resume_from.is_dir() or not job.resume_from.name.startswith("global_step_"):
            raise JobError(f"resume_from must be an existing global_step_N folder, got {job.resume_from}")
        if not (job.resume_from / "trainer_state.pt").exists():
            raise JobError(f"{job.resume_from} is not a local-backend checkpoint (no trainer_state.pt)")
